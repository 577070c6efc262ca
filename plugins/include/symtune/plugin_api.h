/* The native rule-plugin interface (docs/rules.md, "Plugins"): plain C, so the loader finds the
 * entry points by name and checks the plugin's ABI before it runs any of the plugin's rules.
 *
 * A plugin is a shared library in the user's plugin folder ($XDG_DATA_HOME/symtune/plugins, else
 * ~/.local/share/symtune/plugins) or the install's (<lib>/symtune/plugins, next to
 * libsymtune_engine.so). It exports
 *
 *   const symtune_plugin_info* symtune_plugin_describe(void);
 *   int symtune_plugin_init(const symtune_plugin_host* host);     -- 0: loaded
 *
 * The engine calls symtune_plugin_describe first, refuses the plugin unless its abi equals
 * SYMTUNE_PLUGIN_ABI, then calls symtune_plugin_init, in which the plugin adds its rule-language
 * rules through host->add_rules. A plugin's C++ rules register with SYMTUNE_REGISTER_RULE
 * (symtune/rule_registry.h) when the library loads, and count as the plugin's. If init fails, or
 * a rule's name is taken, none of the plugin's rules are registered.
 *
 * SYMTUNE_PLUGIN(name, version, description) defines symtune_plugin_describe and opens
 * symtune_plugin_init, whose body follows (`host` in scope):
 *
 *   SYMTUNE_PLUGIN("mine", "1.0.0", "my rules") {
 *     char error[256];
 *     return host->add_rules(host->registry, "rule r { ... }", error, sizeof error);
 *   } */
#ifndef SYMTUNE_PLUGIN_API_H
#define SYMTUNE_PLUGIN_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever these structs or the C++ rule interface (RuleContext, NativeRule) change. */
#define SYMTUNE_PLUGIN_ABI 1

typedef struct symtune_plugin_info {
  int abi; /* SYMTUNE_PLUGIN_ABI the plugin was built with */
  const char* name;
  const char* version;
  const char* description;
} symtune_plugin_info;

typedef struct symtune_plugin_host {
  int abi;        /* SYMTUNE_PLUGIN_ABI of the engine loading the plugin */
  void* registry; /* opaque: pass it back to add_rules */
  /* Adds the rules of `source` (the rule language). Returns 0, or nonzero with a one-line reason
   * ("3:7: unknown name `gard` (did you mean `grad`?)") written to `error` (NUL-terminated,
   * truncated to error_size). */
  int (*add_rules)(void* registry, const char* source, char* error, size_t error_size);
} symtune_plugin_host;

typedef const symtune_plugin_info* (*symtune_plugin_describe_fn)(void);
typedef int (*symtune_plugin_init_fn)(const symtune_plugin_host* host);

#ifdef __cplusplus
}
#define SYMTUNE_PLUGIN_EXTERN extern "C" __attribute__((visibility("default")))
#else
#define SYMTUNE_PLUGIN_EXTERN __attribute__((visibility("default")))
#endif

#define SYMTUNE_PLUGIN(NAME, VERSION, DESCRIPTION)                                            \
  SYMTUNE_PLUGIN_EXTERN const symtune_plugin_info* symtune_plugin_describe(void) {            \
    static const symtune_plugin_info info = {SYMTUNE_PLUGIN_ABI, NAME, VERSION, DESCRIPTION}; \
    return &info;                                                                             \
  }                                                                                           \
  SYMTUNE_PLUGIN_EXTERN int symtune_plugin_init(const symtune_plugin_host* host)

#endif /* SYMTUNE_PLUGIN_API_H */
