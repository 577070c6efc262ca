#pragma once
// `symtune tune SESSION --budget-steps N`: auto_tune on a session, the fastest configuration
// written into its control block (docs/control.md, "auto_tune").

#include "command_line.h"

namespace symtune::app {

// Exit status: 0 tuned and written, 1 the search or the writing failed, 2 bad input.
int runTuneCommand(const CommandLine& cl);

}  // namespace symtune::app
