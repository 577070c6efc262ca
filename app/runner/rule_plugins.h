#pragma once
// The rule plugins a command loads before it builds a session's trainer (docs/rules.md,
// "Plugins").

namespace symtune::app {

// The registry gets the trusted plugin folders' rules too. What was refused, and library packs
// that were skipped, are said on stderr; the command goes on without them. Every command that
// builds a trainer for a session naming rules calls it (--batch, check, graph, tune): one that
// did not refused a session the others took ("no rule named ... is registered").
void loadRulePlugins();

}  // namespace symtune::app
