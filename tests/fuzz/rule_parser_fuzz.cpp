// Fuzz target for the rule language's front end: any text either parses or throws RuleError —
// never another exception, a crash or undefined behaviour — and every rule that parses parses
// again from its own source text with the same name, selectors and actions.
//
//   scripts/fuzz.sh 300      # five minutes, with the seed corpus in tests/fuzz/corpus/rule_parser

#include <cstdint>
#include <cstdlib>
#include <string>

#include "symtune/core/rules.h"

namespace {

void roundTrip(const symtune::rules::Rule& rule) {
  const auto again = symtune::rules::parseRules(rule.source);
  if (again.size() != 1 || again[0].name != rule.name ||
      again[0].selectors.size() != rule.selectors.size() ||
      again[0].actions.size() != rule.actions.size() ||
      again[0].perParameter != rule.perParameter ||
      (again[0].trigger == nullptr) != (rule.trigger == nullptr))
    std::abort();  // a rule's own text must give the same rule
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& rule : symtune::rules::parseRules(text))
      roundTrip(rule);
  } catch (const symtune::rules::RuleError&) {
    // a rejected rule: the expected outcome for most inputs
  }
  return 0;
}
