// Plugins for tests/engine/rules/tst_plugin_loader.cpp, one source built in variants:
// FAKE_NO_ENTRY (a shared library without the entry points), FAKE_ABI (the ABI it claims),
// FAKE_RULES (the rules its init adds; a broken rule makes init fail).

#include "symtune/plugin_api.h"

#ifdef FAKE_NO_ENTRY

extern "C" __attribute__((visibility("default"))) int symtune_test_not_a_plugin(void) {
  return 1;
}

#else

#ifndef FAKE_ABI
#define FAKE_ABI SYMTUNE_PLUGIN_ABI
#endif
#ifndef FAKE_RULES
#define FAKE_RULES "rule fake_rule { skip step }"
#endif

SYMTUNE_PLUGIN_EXTERN const symtune_plugin_info* symtune_plugin_describe(void) {
  static const symtune_plugin_info info = {FAKE_ABI, "fake", "0.1.0", "a test plugin"};
  return &info;
}

SYMTUNE_PLUGIN_EXTERN int symtune_plugin_init(const symtune_plugin_host* host) {
  char error[256];
  return host->add_rules(host->registry, FAKE_RULES, error, sizeof error);
}

#endif
