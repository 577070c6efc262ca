#pragma once
// `symtune rules check|export|import`: rule packs from the command line (symtune::core only).
// A rewrite's IR is checked by the engine: `symtune rules check` and `rules export` hand a file
// holding rewrites over to symtune-runner, which runs the same command with `checkRewrites` set;
// `rules import` goes there too, whose registry knows the built-in and plugins' rules a pack must
// not reuse.

#include <functional>
#include <map>
#include <string>

#include "command_line.h"
#include "symtune/core/rules.h"

namespace symtune::app {

// Checks a rule's rewrites as TorchScript IR; throws rules::RuleError.
using RewriteCheck = std::function<void(const rules::Rule&)>;

// The rules a session gets from elsewhere than the pack library (rule name → where from): the
// built-in pack's, plugins'. The engine's registry knows them.
using RegisteredRules = std::function<std::map<std::string, std::string>()>;

// Runs a parsed `rules` command. Returns the exit status: 0 done, 2 bad input (the reason on
// stderr, one line). With `checkRewrites`, `check`, `export` and `import` also check each
// rewrite's IR; with `registered`, `import` refuses a pack whose rules would clash with those.
int runRulesCommand(const CommandLine& cl, const RewriteCheck& checkRewrites = {},
                    const RegisteredRules& registered = {});

// Whether `rules check` or `rules export` of this file needs the engine: it parses and holds a
// rewrite.
bool needsRewriteCheck(const CommandLine& cl);

}  // namespace symtune::app
