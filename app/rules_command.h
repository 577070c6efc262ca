#pragma once
// `symtune rules check|export|import`: rule packs from the command line (symtune::core only).

#include "command_line.h"

namespace symtune::app {

// Runs a parsed `rules` command. Returns the exit status: 0 done, 2 bad input (the reason on
// stderr, one line).
int runRulesCommand(const CommandLine& cl);

}  // namespace symtune::app
