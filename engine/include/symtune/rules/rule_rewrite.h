#pragma once
// IR rewrite rules (docs/rules.md, "Rewrites"): a TorchScript IR pattern and its replacement,
// applied to a model's compiled methods with torch::jit::SubgraphRewriter (Note [Rewrite sites]).
//
//   auto reports = symtune::rules::applyRewrites(module, {tanhGeluRule});
//   reports[0].sites   // how many matches were replaced, over every method

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/script.h>

#include "symtune/core/rules.h"

namespace symtune::rules {

// What one rewrite rule changed in a module.
struct RewriteReport {
  std::string rule;
  int64_t sites = 0;  // matches replaced, over every function
  // Each function that changed (qualified name, e.g. "__torch__.zoo.XLDecoder.forward") and its
  // sites, in the order they were visited.
  std::vector<std::pair<std::string, int64_t>> functions;
};

// Checks each `rewrite` of `rule` as TorchScript IR: both sides parse, the pattern has a node
// that is not a constant, and both sides take the same number of inputs and return the same
// number of outputs. Throws RuleError at the action (the IR parser's message on the first line).
void validateRewrites(const Rule& rule);

// Applies the rewrites of `rules` (in order; rules without rewrites are skipped) to the methods of
// `module` and of its submodules — each compiled function once — restricted by the rules'
// selectors: `modules` globs over module paths ("" is the root, "decoder", "blocks.0"), `nodes`
// globs over op kinds a match must contain ("aten::gelu"). A method belongs to its class, so
// selecting one module rewrites every module of its class.
//
// Must run before the module first runs: TorchScript keeps each method's executor, and the
// optimized graph it inlined callees into, from the first call on. Throws std::logic_error when a
// rewrite leaves a graph that fails TorchScript's lint.
std::vector<RewriteReport> applyRewrites(const torch::jit::Module& module,
                                         const std::vector<Rule>& rules);

}  // namespace symtune::rules
