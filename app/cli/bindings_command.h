#pragma once
// `symtune bindings SESSION|REPORT|TABLE [--json]`: the binding table DynaCompiler measured
// (docs/binding.md) — a session's table file, the table in a run's report, or a table file — as
// a list of sites and buckets with their winners and candidates' times, or as JSON.

#include "command_line.h"

namespace symtune::app {

// Returns the exit status: 0 printed, 2 bad input (the reason on stderr, one line).
int runBindingsCommand(const CommandLine& cl);

}  // namespace symtune::app
