#include "rule_compiler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace symtune::rules::detail {

Fn Compiler::compile(const Expr& e) {
  Fn f = compileNode(e);
  if (e.type != Type::Tensor && e.type != Type::Mask)
    return f;
  const bool mask = e.type == Type::Mask;
  return [f, mask](Env& env) {
    Value v = f(env);
    if (!v.tensor.defined())
      v.tensor = asTensor(v, env, mask);
    // A tensor the size of one element (`where(step > 5, grad, 1)` taking its number, a 1-D
    // unit_norm) stands for one the gradient's shape: as it was, `sum` and `numel` of it counted
    // one element and `std` was NaN.
    if (v.tensor.dim() == 0 && env.grad != nullptr && env.grad->dim() > 0)
      v.tensor = v.tensor.expand(env.grad->sizes());
    return v;
  };
}

namespace {

// Note [Rules in float]
// A half or bfloat16 gradient or parameter is read in float, as the fused RMS clamp reads it:
// in half, `grad ^ 2` overflows for |grad| >= 256, the mean of it is infinite, and the RMS clamp
// it feeds did nothing to the very outliers it is for (while the lowered form, which sums in
// float, clamped them). `set grad` rounds the result back to the gradient's type.
torch::Tensor readInFloat(const torch::Tensor& t) {
  const auto type = t.scalar_type();
  return type == torch::kHalf || type == torch::kBFloat16 ? t.to(torch::kFloat) : t;
}

}  // namespace

Fn Compiler::compileNode(const Expr& e) {
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

Fn Compiler::name(const Expr& e) {
  if (e.name == "grad")  // Note [Rules in float]
    return [](Env& env) { return tensor(readInFloat(*env.grad)); };
  if (e.name == "param")
    return [](Env& env) { return tensor(readInFloat(env.param->detach())); };
  if (e.name == "lr")
    return [](Env& env) { return number(env.lr); };
  if (auto f = featureNamed(e.name)) {
    const Feature feature = *f;
    return [feature](Env& env) { return number((*env.features)[feature]); };
  }
  const size_t slot = lets_.at(e.name);
  return [slot](Env& env) { return env.lets[slot]; };
}

Fn Compiler::unaryOp(const Expr& e) {
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

Fn Compiler::binaryOp(const Expr& e) {
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

Fn Compiler::call(const Expr& e) {
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
  if (f == "std") {  // n - 1 in the denominator, as torch.std; of one element, 0 (not NaN)
    return reduce(args[0], [](const torch::Tensor& t) {
      return t.numel() > 1 ? t.std() : torch::zeros({}, t.options());
    });
  }
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
      if (!x.tensor.defined() && !y.tensor.defined()) {
        // A NaN in either is the result, whichever side, as torch::maximum/minimum give it.
        if (std::isnan(x.number) || std::isnan(y.number))
          return number(std::numeric_limits<double>::quiet_NaN());
        return number(isMax ? std::max(x.number, y.number) : std::min(x.number, y.number));
      }
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
      if (!v.tensor.defined() && !l.tensor.defined() && !h.tensor.defined()) {
        // torch::clamp's: a NaN value or bound gives NaN.
        if (std::isnan(v.number) || std::isnan(l.number) || std::isnan(h.number))
          return number(std::numeric_limits<double>::quiet_NaN());
        return number(std::min(std::max(v.number, l.number), h.number));
      }
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

Fn Compiler::reduce(Fn a, std::function<torch::Tensor(const torch::Tensor&)> op) {
  return [a, op](Env& env) { return tensor(op(a(env).tensor)); };
}

}  // namespace symtune::rules::detail
