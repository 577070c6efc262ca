#pragma once
// Compiles a checked rule expression (rules.h) into a closure over ATen operations, once; the
// closure runs every step the rule does.

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "rule_value.h"
#include "symtune/core/rules.h"

namespace symtune::rules::detail {

// Compiles the expressions of one rule; `lets` maps the rule's `let` names to their slots in
// Env::lets, filled in as the rule's actions are compiled in order.
class Compiler {
 public:
  explicit Compiler(std::map<std::string, size_t>& lets) : lets_(lets) {}

  // A tensor- or mask-typed expression always yields a tensor at run time (a `where` on a bool
  // may pick a plain number; `&&` may short-circuit to a plain bool).
  Fn compile(const Expr& e);

 private:
  Fn compileNode(const Expr& e);
  Fn name(const Expr& e);
  Fn unaryOp(const Expr& e);
  Fn binaryOp(const Expr& e);
  Fn call(const Expr& e);
  static Fn reduce(Fn a, std::function<torch::Tensor(const torch::Tensor&)> op);

  std::map<std::string, size_t>& lets_;
};

}  // namespace symtune::rules::detail
