#include "compiled_rule.h"

#include <cmath>

#include "rule_lowering.h"
#include "symtune/kernels/grad_clip.h"

namespace symtune::rules {

using detail::asTensor;
using detail::Compiler;
using detail::Env;
using detail::Fn;
using detail::Value;

CompiledRule::CompiledRule(std::shared_ptr<const NativeRule> native) : native_(std::move(native)) {
  rule_.name = native_->name;
  rule_.perParameter = false;
}

CompiledRule::CompiledRule(const Rule& rule) : rule_(rule), rmsClamp_(isRmsClamp(rule)) {
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

bool CompiledRule::runNative(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
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

bool CompiledRule::runLowered(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                              RuleOutcome& outcome, bool& fired) const {
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : parameters) {
    const torch::Tensor& g = p.grad();
    if (!g.defined() || !selects(name))
      continue;
    // The fused kernel takes dense gradients on one device; on CUDA, of one dtype too (a model
    // with fp16 and fp32 parameters runs the rule interpreted).
    if (g.is_sparse() ||
        (!grads.empty() && (g.device() != grads.front().device() ||
                            (g.is_cuda() && g.scalar_type() != grads.front().scalar_type()))))
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

bool CompiledRule::selects(const std::string& parameter) const {
  for (const auto& s : rule_.selectors) {
    if (s.kind == SelectorKind::Params && globMatch(s.glob, parameter))
      return true;
  }
  return false;
}

std::vector<std::string> CompiledRule::parameterGlobs() const {
  if (native_)
    return {native_->select};
  std::vector<std::string> globs;
  for (const auto& s : rule_.selectors) {
    if (s.kind == SelectorKind::Params)
      globs.push_back(s.glob);
  }
  return globs;
}

bool CompiledRule::run(Env& env, RuleOutcome& outcome) const {
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
      case Action::Kind::SetLr: {
        // As a C++ rule's RuleContext::setLr: a negative, NaN or infinite rate wrecks the run.
        const double lr = s.value(env).asNumber();
        // RuleSet::apply names the rule.
        TORCH_CHECK(std::isfinite(lr) && lr >= 0, "set the learning rate to ", lr,
                    ": it must be finite and not negative");
        outcome.lr = lr;
        env.lr = lr;
        break;
      }
      case Action::Kind::SkipStep:
        outcome.skipStep = true;
        break;
      case Action::Kind::Rewrite:
        break;
    }
  }
  return true;
}

CompiledRule::InPlace CompiledRule::inPlaceForm(const Expr& e, Compiler& compiler,
                                                std::vector<Fn>& operands) {
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

void CompiledRule::updateInPlace(const Step& s, Env& env) {
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

}  // namespace symtune::rules
