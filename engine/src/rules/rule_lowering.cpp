#include "rule_lowering.h"

namespace symtune::rules {

// Note [Lowered rules]
// A per-parameter rule whose body is exactly the RMS clamp — `let t = sqrt(mean(grad ^ 2))`, then
// `set grad = clamp(grad, -t, t)`, no `when` (the built-in gradient_steering) — runs as one
// symtune::rms_clamp_ over all the gradients it selects: two passes over each in one dispatch
// instead of four ATen ops a parameter (4.2–4.5× on a Transformer's gradients,
// docs/benchmarks.md). The same result up to rounding (the kernel sums squares in double).
// Gradients on more than one device, or sparse ones, take the interpreter.

namespace {

bool isName(const ExprPtr& e, const std::string& name) {
  return e && e->kind == Expr::Kind::Name && e->name == name;
}

bool isCall(const ExprPtr& e, const char* function, size_t arguments) {
  return e && e->kind == Expr::Kind::Call && e->name == function && e->args.size() == arguments;
}

}  // namespace

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

}  // namespace symtune::rules
