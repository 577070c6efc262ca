#include "symtune/rule_engine.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>

#include "symtune/kernels/grad_clip.h"
#include "symtune/rule_registry.h"

namespace symtune::rules {

namespace {

// Note [Lowered rules]
// A per-parameter rule whose body is exactly the RMS clamp — `let t = sqrt(mean(grad ^ 2))`, then
// `set grad = clamp(grad, -t, t)`, no `when` (the built-in gradient_steering) — runs as one
// symtune::rms_clamp_ over all the gradients it selects: two passes over each in one dispatch
// instead of four ATen ops a parameter (4.2–4.5× on a Transformer's gradients,
// docs/benchmarks.md). The same result up to rounding (the kernel sums squares in double).
// Gradients on more than one device, or sparse ones, take the interpreter.
bool isName(const ExprPtr& e, const std::string& name) {
  return e && e->kind == Expr::Kind::Name && e->name == name;
}

bool isCall(const ExprPtr& e, const char* function, size_t arguments) {
  return e && e->kind == Expr::Kind::Call && e->name == function && e->args.size() == arguments;
}

bool isRmsClamp(const Rule& rule) {
  if (!rule.perParameter || rule.trigger || rule.actions.size() != 2)
    return false;
  const Action &let = rule.actions[0], &set = rule.actions[1];
  if (let.kind != Action::Kind::Let || set.kind != Action::Kind::SetGrad)
    return false;
  // sqrt(mean(grad ^ 2))
  if (!isCall(let.value, "sqrt", 1) || !isCall(let.value->args[0], "mean", 1))
    return false;
  const ExprPtr& square = let.value->args[0]->args[0];
  if (!square || square->kind != Expr::Kind::Binary || square->name != "^" ||
      square->args.size() != 2 || !isName(square->args[0], "grad") ||
      square->args[1]->kind != Expr::Kind::Number || square->args[1]->number != 2)
    return false;
  // clamp(grad, -t, t)
  const ExprPtr& clamp = set.value;
  if (!isCall(clamp, "clamp", 3) || !isName(clamp->args[0], "grad") ||
      !isName(clamp->args[2], let.name))
    return false;
  const ExprPtr& low = clamp->args[1];
  return low->kind == Expr::Kind::Unary && low->name == "-" && low->args.size() == 1 &&
         isName(low->args[0], let.name);
}

// A value at run time. Scalars and bools computed from tensors stay 0-dim tensors (no read-back
// from the device until a decision needs one); constants and features are plain numbers.
struct Value {
  double number = 0;
  bool truth = false;
  torch::Tensor tensor;  // when defined, the value

  double asNumber() const { return tensor.defined() ? tensor.item<double>() : number; }
  bool asBool() const { return tensor.defined() ? tensor.item<bool>() : truth; }
};

struct Env {
  const StepFeatures* features = nullptr;
  double lr = 0;
  torch::Tensor* grad = nullptr;  // the selected parameter's gradient (a handle to it)
  const torch::Tensor* param = nullptr;
  std::vector<Value> lets;
};

using Fn = std::function<Value(Env&)>;

Value number(double d) {
  Value v;
  v.number = d;
  return v;
}
Value truth(bool b) {
  Value v;
  v.truth = b;
  return v;
}
Value tensor(torch::Tensor t) {
  Value v;
  v.tensor = std::move(t);
  return v;
}

// A value as a tensor on the parameter's device (a plain number becomes a 0-dim tensor).
torch::Tensor asTensor(const Value& v, const Env& env, bool isBool = false) {
  if (v.tensor.defined())
    return v.tensor;
  auto options = env.grad ? env.grad->options() : torch::TensorOptions().dtype(torch::kFloat);
  if (isBool)
    return torch::scalar_tensor(v.truth, options.dtype(torch::kBool));
  return torch::scalar_tensor(v.number, options);
}

class Compiler {
 public:
  explicit Compiler(std::map<std::string, size_t>& lets) : lets_(lets) {}

  // A tensor- or mask-typed expression always yields a tensor at run time (a `where` on a bool
  // may pick a plain number; `&&` may short-circuit to a plain bool).
  Fn compile(const Expr& e) {
    Fn f = compileNode(e);
    if (e.type != Type::Tensor && e.type != Type::Mask)
      return f;
    const bool mask = e.type == Type::Mask;
    return [f, mask](Env& env) {
      Value v = f(env);
      if (!v.tensor.defined())
        v.tensor = asTensor(v, env, mask);
      return v;
    };
  }

  Fn compileNode(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Number: {
        const double d = e.number;
        return [d](Env&) { return number(d); };
      }
      case Expr::Kind::Boolean: {
        const bool b = e.boolean;
        return [b](Env&) { return truth(b); };
      }
      case Expr::Kind::Name:
        return name(e);
      case Expr::Kind::Unary:
        return unaryOp(e);
      case Expr::Kind::Binary:
        return binaryOp(e);
      case Expr::Kind::Call:
        return call(e);
    }
    throw std::logic_error("unknown expression kind");
  }

 private:
  Fn name(const Expr& e) {
    if (e.name == "grad")
      return [](Env& env) { return tensor(*env.grad); };
    if (e.name == "param")
      return [](Env& env) { return tensor(env.param->detach()); };
    if (e.name == "lr")
      return [](Env& env) { return number(env.lr); };
    if (auto f = featureNamed(e.name)) {
      const Feature feature = *f;
      return [feature](Env& env) { return number((*env.features)[feature]); };
    }
    const size_t slot = lets_.at(e.name);
    return [slot](Env& env) { return env.lets[slot]; };
  }

  Fn unaryOp(const Expr& e) {
    Fn a = compile(*e.args[0]);
    if (e.name == "!") {
      return [a](Env& env) {
        Value v = a(env);
        return v.tensor.defined() ? tensor(v.tensor.logical_not()) : truth(!v.truth);
      };
    }
    return [a](Env& env) {
      Value v = a(env);
      return v.tensor.defined() ? tensor(-v.tensor) : number(-v.number);
    };
  }

  Fn binaryOp(const Expr& e) {
    Fn a = compile(*e.args[0]);
    Fn b = compile(*e.args[1]);
    const std::string op = e.name;
    if (op == "&&" || op == "||") {
      const bool isAnd = op == "&&";
      return [a, b, isAnd](Env& env) {
        Value x = a(env);
        if (!x.tensor.defined() && x.truth != isAnd)
          return truth(x.truth);  // short circuit on a plain bool
        Value y = b(env);
        if (!x.tensor.defined() && !y.tensor.defined())
          return truth(y.truth);
        auto tx = asTensor(x, env, true), ty = asTensor(y, env, true);
        return tensor(isAnd ? tx.logical_and(ty) : tx.logical_or(ty));
      };
    }
    // Each operator three ways: on two numbers, tensor with number (ATen's Scalar overloads,
    // e.g. pow(x, 2) squares), and on two tensors.
    using Plain = std::function<double(double, double)>;
    using TensorNumber = std::function<torch::Tensor(const torch::Tensor&, double)>;
    using NumberTensor = std::function<torch::Tensor(double, const torch::Tensor&)>;
    using Tensors = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
    Plain plain;
    TensorNumber tn;
    NumberTensor nt;
    Tensors tt;
    bool comparison = false;
    if (op == "+") {
      plain = [](double x, double y) { return x + y; };
      tn = [](const torch::Tensor& x, double y) { return x + y; };
      nt = [](double x, const torch::Tensor& y) { return y + x; };
      tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; };
    } else if (op == "-") {
      plain = [](double x, double y) { return x - y; };
      tn = [](const torch::Tensor& x, double y) { return x - y; };
      nt = [](double x, const torch::Tensor& y) { return torch::rsub(y, x); };
      tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x - y; };
    } else if (op == "*") {
      plain = [](double x, double y) { return x * y; };
      tn = [](const torch::Tensor& x, double y) { return x * y; };
      nt = [](double x, const torch::Tensor& y) { return y * x; };
      tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x * y; };
    } else if (op == "/") {
      plain = [](double x, double y) { return x / y; };
      tn = [](const torch::Tensor& x, double y) { return x / y; };
      nt = [](double x, const torch::Tensor& y) { return y.reciprocal() * x; };
      tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x / y; };
    } else if (op == "^") {
      plain = [](double x, double y) { return std::pow(x, y); };
      tn = [](const torch::Tensor& x, double y) { return torch::pow(x, y); };
      nt = [](double x, const torch::Tensor& y) { return torch::pow(x, y); };
      tt = [](const torch::Tensor& x, const torch::Tensor& y) { return torch::pow(x, y); };
    } else {
      comparison = true;
      if (op == "<") {
        plain = [](double x, double y) { return double(x < y); };
        tn = [](const torch::Tensor& x, double y) { return x.lt(y); };
        nt = [](double x, const torch::Tensor& y) { return y.gt(x); };
        tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x.lt(y); };
      } else if (op == "<=") {
        plain = [](double x, double y) { return double(x <= y); };
        tn = [](const torch::Tensor& x, double y) { return x.le(y); };
        nt = [](double x, const torch::Tensor& y) { return y.ge(x); };
        tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x.le(y); };
      } else if (op == ">") {
        plain = [](double x, double y) { return double(x > y); };
        tn = [](const torch::Tensor& x, double y) { return x.gt(y); };
        nt = [](double x, const torch::Tensor& y) { return y.lt(x); };
        tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x.gt(y); };
      } else if (op == ">=") {
        plain = [](double x, double y) { return double(x >= y); };
        tn = [](const torch::Tensor& x, double y) { return x.ge(y); };
        nt = [](double x, const torch::Tensor& y) { return y.le(x); };
        tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x.ge(y); };
      } else if (op == "==") {
        plain = [](double x, double y) { return double(x == y); };
        tn = [](const torch::Tensor& x, double y) { return x.eq(y); };
        nt = [](double x, const torch::Tensor& y) { return y.eq(x); };
        tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x.eq(y); };
      } else {
        plain = [](double x, double y) { return double(x != y); };
        tn = [](const torch::Tensor& x, double y) { return x.ne(y); };
        nt = [](double x, const torch::Tensor& y) { return y.ne(x); };
        tt = [](const torch::Tensor& x, const torch::Tensor& y) { return x.ne(y); };
      }
    }
    return [a, b, plain, tn, nt, tt, comparison](Env& env) {
      Value x = a(env), y = b(env);
      const bool xt = x.tensor.defined(), yt = y.tensor.defined();
      if (!xt && !yt) {
        const double r = plain(x.number, y.number);
        return comparison ? truth(r != 0) : number(r);
      }
      if (!yt)
        return tensor(tn(x.tensor, y.number));
      if (!xt)
        return tensor(nt(x.number, y.tensor));
      return tensor(tt(x.tensor, y.tensor));
    };
  }

  Fn call(const Expr& e) {
    std::vector<Fn> args;
    for (const auto& arg : e.args)
      args.push_back(compile(*arg));
    const std::string& f = e.name;
    auto unaryTensor = [&](std::function<torch::Tensor(const torch::Tensor&)> op,
                           std::function<double(double)> plain) -> Fn {
      Fn a = args[0];
      return [a, op, plain](Env& env) {
        Value v = a(env);
        return v.tensor.defined() ? tensor(op(v.tensor)) : number(plain(v.number));
      };
    };
    if (f == "mean")
      return reduce(args[0], [](const torch::Tensor& t) { return t.mean(); });
    if (f == "sum")
      return reduce(args[0], [](const torch::Tensor& t) { return t.sum(); });
    if (f == "norm")
      return reduce(args[0], [](const torch::Tensor& t) { return t.norm(); });
    if (f == "std")
      return reduce(args[0], [](const torch::Tensor& t) { return t.std(); });
    if (f == "numel") {
      Fn a = args[0];
      return [a](Env& env) { return number(static_cast<double>(a(env).tensor.numel())); };
    }
    if ((f == "max" || f == "min") && args.size() == 1) {
      return f == "max" ? reduce(args[0], [](const torch::Tensor& t) { return t.max(); })
                        : reduce(args[0], [](const torch::Tensor& t) { return t.min(); });
    }
    if (f == "max" || f == "min") {
      Fn a = args[0], b = args[1];
      const bool isMax = f == "max";
      return [a, b, isMax](Env& env) {
        Value x = a(env), y = b(env);
        if (!x.tensor.defined() && !y.tensor.defined())
          return number(isMax ? std::max(x.number, y.number) : std::min(x.number, y.number));
        auto tx = asTensor(x, env), ty = asTensor(y, env);
        return tensor(isMax ? torch::maximum(tx, ty) : torch::minimum(tx, ty));
      };
    }
    if (f == "abs")
      return unaryTensor([](const torch::Tensor& t) { return t.abs(); },
                         [](double d) { return std::abs(d); });
    if (f == "sqrt")
      return unaryTensor([](const torch::Tensor& t) { return t.sqrt(); },
                         [](double d) { return std::sqrt(d); });
    if (f == "sign")
      return unaryTensor([](const torch::Tensor& t) { return t.sign(); },
                         [](double d) { return double((d > 0) - (d < 0)); });
    if (f == "exp")
      return unaryTensor([](const torch::Tensor& t) { return t.exp(); },
                         [](double d) { return std::exp(d); });
    if (f == "log")
      return unaryTensor([](const torch::Tensor& t) { return t.log(); },
                         [](double d) { return std::log(d); });
    if (f == "unit_norm") {
      Fn a = args[0];
      return [a](Env& env) {
        const torch::Tensor t = a(env).tensor;
        if (t.dim() <= 1)
          return tensor(t.norm());
        std::vector<int64_t> dims;
        for (int64_t d = 1; d < t.dim(); ++d)
          dims.push_back(d);
        return tensor(t.norm(2, dims, /*keepdim=*/true));
      };
    }
    if (f == "clamp") {
      Fn x = args[0], lo = args[1], hi = args[2];
      return [x, lo, hi](Env& env) {
        Value v = x(env), l = lo(env), h = hi(env);
        if (!v.tensor.defined() && !l.tensor.defined() && !h.tensor.defined())
          return number(std::min(std::max(v.number, l.number), h.number));
        return tensor(torch::clamp(asTensor(v, env), asTensor(l, env), asTensor(h, env)));
      };
    }
    if (f == "where") {
      Fn c = args[0], x = args[1], y = args[2];
      const bool mask = e.args[0]->type == Type::Mask;
      return [c, x, y, mask](Env& env) {
        Value cond = c(env);
        if (!mask)
          return cond.asBool() ? x(env) : y(env);
        return tensor(torch::where(cond.tensor, asTensor(x(env), env), asTensor(y(env), env)));
      };
    }
    throw std::logic_error("the checker let an unknown function through: " + f);
  }

  static Fn reduce(Fn a, std::function<torch::Tensor(const torch::Tensor&)> op) {
    return [a, op](Env& env) { return tensor(op(a(env).tensor)); };
  }

  std::map<std::string, size_t>& lets_;
};

}  // namespace

// One rule, compiled: its trigger and actions as closures.
class CompiledRule {
 public:
  explicit CompiledRule(std::shared_ptr<const NativeRule> native) : native_(std::move(native)) {
    rule_.name = native_->name;
    rule_.perParameter = false;
  }

  explicit CompiledRule(const Rule& rule) : rule_(rule), rmsClamp_(isRmsClamp(rule)) {
    Compiler compiler(letSlots_);
    if (rule.trigger)
      trigger_ = compiler.compile(*rule.trigger);
    for (const auto& a : rule.actions) {
      Step s;
      s.kind = a.kind;
      if (a.kind == Action::Kind::SetGrad)
        s.inPlace = inPlaceForm(*a.value, compiler, s.operands);
      if (a.value && s.inPlace == InPlace::None)
        s.value = compiler.compile(*a.value);
      if (a.kind == Action::Kind::Let) {
        s.slot = letSlots_.size();
        letSlots_[a.name] = s.slot;
      }
      steps_.push_back(std::move(s));
    }
  }

  const Rule& rule() const { return rule_; }
  const std::string& name() const { return rule_.name; }
  bool enabled = true;

  // A C++ rule: runs once per step on its selected parameters that have a gradient.
  bool runNative(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                 const StepFeatures& features, double lr, RuleOutcome& outcome) const {
    std::vector<std::pair<std::string, torch::Tensor>> selected;
    for (const auto& [name, p] : parameters) {
      if (p.grad().defined() && globMatch(native_->select, name))
        selected.emplace_back(name, p);
    }
    RuleContext context(features, lr, std::move(selected), outcome);
    torch::NoGradGuard noGrad;
    return native_->run(context);
  }
  bool isNative() const { return native_ != nullptr; }
  bool lowered() const { return rmsClamp_; }  // Note [Lowered rules]

  // The lowered RMS clamp over the selected gradients; false (nothing done) when they are not
  // all dense and on one device, for the interpreter to take.
  bool runLowered(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                  RuleOutcome& outcome, bool& fired) const {
    std::vector<at::Tensor> grads;
    for (const auto& [name, p] : parameters) {
      const torch::Tensor& g = p.grad();
      if (!g.defined() || !selects(name))
        continue;
      if (g.is_sparse() || (!grads.empty() && g.device() != grads.front().device()))
        return false;
      grads.push_back(g);
    }
    if (!grads.empty()) {
      torch::NoGradGuard noGrad;
      kernels::rmsClamp_(grads);
      outcome.gradientsChanged += static_cast<int64_t>(grads.size());
    }
    fired = !grads.empty();
    return true;
  }

  bool selects(const std::string& parameter) const {
    for (const auto& s : rule_.selectors) {
      if (s.kind == SelectorKind::Params && globMatch(s.glob, parameter))
        return true;
    }
    return false;
  }

  // Runs the rule once in `env`; true when its trigger held.
  bool run(Env& env, RuleOutcome& outcome) const {
    env.lets.assign(letSlots_.size(), Value{});
    if (trigger_ && !trigger_(env).asBool())
      return false;
    for (const auto& s : steps_) {
      switch (s.kind) {
        case Action::Kind::Let: {
          Value v = s.value(env);
          // `let g = grad` keeps the gradient as it is now, whatever a later `set grad` does.
          if (v.tensor.defined() && env.grad && v.tensor.is_same(*env.grad))
            v.tensor = v.tensor.clone();
          env.lets[s.slot] = std::move(v);
          break;
        }
        case Action::Kind::SetGrad: {
          if (s.inPlace != InPlace::None) {
            updateInPlace(s, env);
            ++outcome.gradientsChanged;
            break;
          }
          const Value v = s.value(env);
          torch::NoGradGuard noGrad;
          torch::Tensor& grad = *env.grad;
          if (!v.tensor.defined()) {
            grad.fill_(v.number);
          } else if (v.tensor.use_count() == 1 && v.tensor.storage().use_count() == 1 &&
                     !v.tensor.is_same(grad) && v.tensor.sizes() == grad.sizes() &&
                     v.tensor.strides() == grad.strides() && v.tensor.dtype() == grad.dtype() &&
                     v.tensor.device() == grad.device()) {
            // A fresh tensor (held by nothing else, not even a `let`, and with storage of its own:
            // not a view of the parameter) laid out like the gradient becomes the gradient.
            env.param->mutable_grad() = v.tensor;
            grad = v.tensor;
          } else {
            grad.copy_(v.tensor);
          }
          ++outcome.gradientsChanged;
          break;
        }
        case Action::Kind::SetLr:
          outcome.lr = s.value(env).asNumber();
          env.lr = *outcome.lr;
          break;
        case Action::Kind::SkipStep:
          outcome.skipStep = true;
          break;
        case Action::Kind::Rewrite:
          break;
      }
    }
    return true;
  }

 private:
  // `set grad = grad OP x` and `set grad = clamp(grad, lo, hi)` update the gradient in place:
  // the operands are evaluated first, then one in-place ATen op (no new gradient tensor).
  enum class InPlace { None, Add, Sub, Mul, Div, Clamp };

  struct Step {
    Action::Kind kind = Action::Kind::Let;
    Fn value;
    size_t slot = 0;
    InPlace inPlace = InPlace::None;
    std::vector<Fn> operands;  // the in-place form's operands after `grad`
  };

  static InPlace inPlaceForm(const Expr& e, Compiler& compiler, std::vector<Fn>& operands) {
    const bool gradFirst =
        !e.args.empty() && e.args[0]->kind == Expr::Kind::Name && e.args[0]->name == "grad";
    if (!gradFirst)
      return InPlace::None;
    InPlace form = InPlace::None;
    if (e.kind == Expr::Kind::Call && e.name == "clamp")
      form = InPlace::Clamp;
    else if (e.kind == Expr::Kind::Binary && e.name == "+")
      form = InPlace::Add;
    else if (e.kind == Expr::Kind::Binary && e.name == "-")
      form = InPlace::Sub;
    else if (e.kind == Expr::Kind::Binary && e.name == "*")
      form = InPlace::Mul;
    else if (e.kind == Expr::Kind::Binary && e.name == "/")
      form = InPlace::Div;
    if (form != InPlace::None) {
      for (size_t i = 1; i < e.args.size(); ++i)
        operands.push_back(compiler.compile(*e.args[i]));
    }
    return form;
  }

  static void updateInPlace(const Step& s, Env& env) {
    std::vector<Value> v;
    for (const auto& f : s.operands)
      v.push_back(f(env));
    torch::NoGradGuard noGrad;
    torch::Tensor& g = *env.grad;
    auto operand = [&](const Value& x) { return x.tensor.defined() ? x.tensor : asTensor(x, env); };
    switch (s.inPlace) {
      case InPlace::Add:
        v[0].tensor.defined() ? g.add_(v[0].tensor) : g.add_(v[0].number);
        break;
      case InPlace::Sub:
        v[0].tensor.defined() ? g.sub_(v[0].tensor) : g.sub_(v[0].number);
        break;
      case InPlace::Mul:
        v[0].tensor.defined() ? g.mul_(v[0].tensor) : g.mul_(v[0].number);
        break;
      case InPlace::Div:
        v[0].tensor.defined() ? g.div_(v[0].tensor) : g.div_(v[0].number);
        break;
      case InPlace::Clamp:
        if (!v[0].tensor.defined() && !v[1].tensor.defined())
          g.clamp_(v[0].number, v[1].number);
        else
          g.clamp_(operand(v[0]), operand(v[1]));
        break;
      case InPlace::None:
        break;
    }
  }
  Rule rule_;
  bool rmsClamp_ = false;
  std::shared_ptr<const NativeRule> native_;
  Fn trigger_;
  std::vector<Step> steps_;
  std::map<std::string, size_t> letSlots_;
};

RuleSet::RuleSet() = default;
RuleSet::~RuleSet() = default;
RuleSet::RuleSet(RuleSet&&) noexcept = default;
RuleSet& RuleSet::operator=(RuleSet&&) noexcept = default;

void RuleSet::add(const std::vector<Rule>& rules, bool enabled) {
  // All or nothing: every rule is checked against the set and the batch before any is added.
  std::vector<std::string> names = this->names();
  for (const auto& r : rules) {
    checkFree(names, r.name);
    names.push_back(r.name);
    for (const auto& a : r.actions) {
      if (a.kind == Action::Kind::Rewrite)
        throw std::invalid_argument("rule `" + r.name +
                                    "` rewrites the model: it is applied to the model's code when "
                                    "the trainer is built (rule_rewrite.h), not to a step");
    }
  }
  std::vector<std::unique_ptr<CompiledRule>> compiled;
  for (const auto& r : rules) {
    compiled.push_back(std::make_unique<CompiledRule>(r));
    compiled.back()->enabled = enabled;
  }
  for (auto& c : compiled)
    rules_.push_back(std::move(c));
}

void RuleSet::add(const NativeRule& rule, bool enabled) {
  TORCH_CHECK(rule.run, "C++ rule `", rule.name, "` has no body");
  RegistryEntry entry;
  entry.name = rule.name;
  entry.native = std::make_shared<const NativeRule>(rule);
  add(entry, enabled);
}

void RuleSet::add(const RegistryEntry& entry, bool enabled) {
  if (entry.native) {
    checkFree(names(), entry.name);
    rules_.push_back(std::make_unique<CompiledRule>(entry.native));
    rules_.back()->enabled = enabled;
  } else {
    add(std::vector<Rule>{*entry.rule}, enabled);
  }
}

void RuleSet::remove(const std::string& name) {
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if ((*it)->name() == name) {
      rules_.erase(it);
      return;
    }
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

void RuleSet::checkFree(const std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) != names.end())
    throw std::invalid_argument("a rule named `" + name + "` is already in the set");
}

void RuleSet::setEnabled(const std::string& name, bool on) {
  for (auto& r : rules_) {
    if (r->rule().name == name) {
      r->enabled = on;
      return;
    }
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

bool RuleSet::lowered(const std::string& name) const {
  for (const auto& r : rules_) {
    if (r->rule().name == name)
      return r->lowered();
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

bool RuleSet::enabled(const std::string& name) const {
  for (const auto& r : rules_) {
    if (r->rule().name == name)
      return r->enabled;
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

const std::string& RuleSet::source(const std::string& name) const {
  for (const auto& r : rules_) {
    if (r->rule().name == name)
      return r->rule().source;
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

std::vector<std::string> RuleSet::names() const {
  std::vector<std::string> out;
  for (const auto& r : rules_)
    out.push_back(r->rule().name);
  return out;
}

RuleOutcome RuleSet::apply(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                           const StepFeatures& features, double lr) {
  RuleOutcome outcome;
  Env env;
  env.features = &features;
  env.lr = lr;
  for (const auto& r : rules_) {
    if (!r->enabled)
      continue;
    outcome.inForce.push_back(r->rule().name);
    bool fired = false;
    if (r->isNative()) {
      fired = r->runNative(parameters, features, env.lr, outcome);
      if (outcome.lr)
        env.lr = *outcome.lr;
    } else if (!r->rule().perParameter) {
      env.grad = nullptr;
      env.param = nullptr;
      fired = r->run(env, outcome);
    } else if (r->lowered() && r->runLowered(parameters, outcome, fired)) {
      // done: Note [Lowered rules]
    } else {
      for (const auto& [name, p] : parameters) {
        torch::Tensor grad = p.grad();
        if (!grad.defined() || !r->selects(name))
          continue;
        env.grad = &grad;
        env.param = &p;
        fired = r->run(env, outcome) || fired;
      }
      env.grad = nullptr;
      env.param = nullptr;
    }
    if (fired)
      outcome.fired.push_back(r->rule().name);
  }
  return outcome;
}

std::future<void> RuleChanges::push(std::function<void(RuleSet&)> change) {
  TORCH_CHECK(change != nullptr, "RuleChanges::push: no change");
  std::promise<void> done;
  auto future = done.get_future();
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.emplace_back(std::move(change), std::move(done));
  return future;
}

void RuleChanges::applyTo(RuleSet& set) {
  decltype(pending_) changes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    changes.swap(pending_);
  }
  for (auto& [change, done] : changes) {
    try {
      change(set);
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  }
}

}  // namespace symtune::rules
