#include "rule_plugins.h"

#include <iostream>

#include "symtune/rules/plugin_loader.h"
#include "symtune/rules/rule_registry.h"

namespace symtune::app {

void loadRulePlugins() {
  auto& registry = rules::Registry::global();
  for (const auto& report : rules::loadPlugins(registry)) {
    if (report.loaded) {
      std::cerr << "symtune: plugin " << report.name << " " << report.version << " ("
                << report.path.string() << "):";
      for (const auto& rule : report.rules)
        std::cerr << " " << rule;
      std::cerr << std::endl;
    } else {
      std::cerr << "symtune: warning: plugin " << report.path.string()
                << " refused: " << report.reason << std::endl;
    }
  }
  for (const auto& problem : registry.problems())
    std::cerr << "symtune: warning: " << problem << std::endl;
}

}  // namespace symtune::app
