#pragma once
// `symtune rules check|export|import`: rule packs from the command line (symtune::core only).
// A rewrite's IR is checked by the engine: `symtune rules check` hands a file holding rewrites
// over to symtune-runner, which runs the same command with `checkRewrites` set.

#include <functional>

#include "command_line.h"
#include "symtune/core/rules.h"

namespace symtune::app {

// Checks a rule's rewrites as TorchScript IR; throws rules::RuleError.
using RewriteCheck = std::function<void(const rules::Rule&)>;

// Runs a parsed `rules` command. Returns the exit status: 0 done, 2 bad input (the reason on
// stderr, one line). With `checkRewrites`, `check` also checks each rewrite's IR.
int runRulesCommand(const CommandLine& cl, const RewriteCheck& checkRewrites = {});

// Whether `rules check` of this file needs the engine: it parses and holds a rewrite.
bool needsRewriteCheck(const CommandLine& cl);

}  // namespace symtune::app
