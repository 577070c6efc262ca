#pragma once
// What compiled rules compute with (compiled_rule.h, rule_compiler.h): a value, the environment
// a rule runs in, and a compiled expression.

#include <functional>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "symtune/core/features.h"

namespace symtune::rules::detail {

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

inline Value number(double d) {
  Value v;
  v.number = d;
  return v;
}
inline Value truth(bool b) {
  Value v;
  v.truth = b;
  return v;
}
inline Value tensor(torch::Tensor t) {
  Value v;
  v.tensor = std::move(t);
  return v;
}

// A value as a tensor on the parameter's device (a plain number becomes a 0-dim tensor): of the
// gradient's dtype, but float where that is half or bfloat16, which rules read in float (Note
// [Rules in float] in rule_compiler.cpp). Until 2026-12-07 a number was made in half there: 1e-8
// became 0 and `grad / max(norm(grad), 1e-8)` gave a zero gradient NaN; 70000 became infinite.
inline torch::Tensor asTensor(const Value& v, const Env& env, bool isBool = false) {
  if (v.tensor.defined())
    return v.tensor;
  auto options = torch::TensorOptions().dtype(torch::kFloat);
  if (env.grad) {
    const auto type = env.grad->scalar_type();
    options = options.device(env.grad->device());
    if (type != torch::kHalf && type != torch::kBFloat16)
      options = options.dtype(type);
  }
  if (isBool)
    return torch::scalar_tensor(v.truth, options.dtype(torch::kBool));
  return torch::scalar_tensor(v.number, options);
}

}  // namespace symtune::rules::detail
