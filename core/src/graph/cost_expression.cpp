// The expression language of the cost templates (cost_templates.h): a recursive-descent evaluator
// over optional numbers, where "unknown" propagates through every operation.

#include <cctype>
#include <stdexcept>

#include "symtune/core/cost_templates.h"

namespace symtune {

int elementSize(const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32")
    return 4;
  if (dtype == "float64" || dtype == "int64" || dtype == "complex64")
    return 8;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16")
    return 2;
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool")
    return 1;
  return 0;
}

namespace {

using Num = std::optional<double>;

class Evaluator {
 public:
  Evaluator(const std::string& text, const std::vector<ValueInfo>& in,
            const std::vector<ValueInfo>& out)
      : s_(text), in_(in), out_(out) {}

  Num run() {
    Num v = expr();
    skipSpace();
    if (pos_ != s_.size())
      fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("cost expression \"" + s_ + "\" at " + std::to_string(pos_) + ": " +
                                what);
  }
  void skipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
  }
  bool eat(char c) {
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c))
      fail(std::string("expected '") + c + "'");
  }
  std::string word() {
    skipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    return s_.substr(start, pos_ - start);
  }
  long integer() {
    skipSpace();
    const bool negative = eat('-');
    skipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
    if (start == pos_)
      fail("expected an integer");
    const long v = std::stol(s_.substr(start, pos_ - start));
    return negative ? -v : v;
  }

  static Num combine(Num a, Num b, char op) {
    if (!a || !b)
      return std::nullopt;
    switch (op) {
      case '+':
        return *a + *b;
      case '-':
        return *a - *b;
      case '*':
        return *a * *b;
      default:
        return *b == 0 ? std::nullopt : Num(*a / *b);
    }
  }

  Num expr() {
    Num v = term();
    for (;;) {
      if (eat('+')) {
        v = combine(v, term(), '+');
      } else if (eat('-')) {
        v = combine(v, term(), '-');
      } else {
        return v;
      }
    }
  }
  Num term() {
    Num v = factor();
    for (;;) {
      if (eat('*')) {
        v = combine(v, factor(), '*');
      } else if (eat('/')) {
        v = combine(v, factor(), '/');
      } else {
        return v;
      }
    }
  }

  // A reference to a value: "in2" or "out0". Returns nullptr when the op has no such value.
  const ValueInfo* value(const std::string& name) {
    const bool input = name == "in";
    if (!input && name != "out")
      fail("expected inN or outN, found \"" + name + "\"");
    const long i = integer();
    const auto& list = input ? in_ : out_;
    return i >= 0 && static_cast<size_t>(i) < list.size() ? &list[static_cast<size_t>(i)] : nullptr;
  }
  static bool isTensor(const ValueInfo* v) {
    return v != nullptr && v->type.rfind("Tensor", 0) == 0;
  }

  static Num numel(const ValueInfo* v) {
    if (!isTensor(v) || !v->shape)
      return std::nullopt;
    double n = 1;
    for (auto d : *v->shape)
      n *= static_cast<double>(d);
    return n;
  }
  static Num bytes(const ValueInfo* v) {
    if (!isTensor(v))
      return 0.0;  // None, absent, scalars and lists carry no tensor data
    const int size = elementSize(v->dtype);
    const Num n = numel(v);
    if (!n || size == 0)
      return std::nullopt;
    return *n * size;
  }

  Num factor() {
    skipSpace();
    if (eat('(')) {
      Num v = expr();
      expect(')');
      return v;
    }
    if (eat('-')) {
      const Num v = factor();
      return v ? Num(-*v) : std::nullopt;
    }
    if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      return static_cast<double>(integer());
    }
    const std::string w = word();
    if (w == "E") {
      const int size = out_.empty() ? 0 : elementSize(out_[0].dtype);
      return size > 0 ? Num(size) : std::nullopt;
    }
    if (w == "numel" || w == "bytes" || w == "has" || w == "val") {
      expect('(');
      const ValueInfo* v = value(word());
      Num result;
      if (w == "numel") {
        result = numel(v);
      } else if (w == "bytes") {
        result = bytes(v);
      } else if (w == "has") {
        result = isTensor(v) ? 1.0 : 0.0;
      } else {
        expect(',');
        const long k = integer();
        if (v != nullptr && v->ints && !v->ints->empty()) {
          // An int[] of one element stands for all (max_pool2d's kernel_size=[3] means 3x3).
          const auto& ints = *v->ints;
          result =
              static_cast<double>(ints[k >= 0 && static_cast<size_t>(k) < ints.size() ? k : 0]);
        }
      }
      expect(')');
      return result;
    }
    if (w == "in" || w == "out") {
      const ValueInfo* v = value(w);
      expect('[');
      const long d = integer();
      expect(']');
      if (!isTensor(v) || !v->shape)
        return std::nullopt;
      const auto rank = static_cast<long>(v->shape->size());
      const long index = d < 0 ? rank + d : d;
      if (index < 0 || index >= rank)
        return std::nullopt;
      return static_cast<double>((*v->shape)[static_cast<size_t>(index)]);
    }
    fail(w.empty() ? "expected a number, a reference or a function" : "unknown name \"" + w + "\"");
  }

  const std::string& s_;
  const std::vector<ValueInfo>& in_;
  const std::vector<ValueInfo>& out_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<double> evaluateCostExpression(const std::string& expression,
                                             const std::vector<ValueInfo>& inputs,
                                             const std::vector<ValueInfo>& outputs) {
  return Evaluator(expression, inputs, outputs).run();
}

}  // namespace symtune
