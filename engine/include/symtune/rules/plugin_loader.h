#pragma once
// Loading native rule plugins (plugins/include/symtune/plugin_api.h, docs/rules.md "Plugins")
// into a rule registry — only from the trusted plugin folders, and only files nobody else can
// change (Note [Plugin trust]).
//
//   for (const auto& r : symtune::rules::loadPlugins(symtune::rules::Registry::global()))
//     std::cerr << r.path << ": " << (r.loaded ? "loaded" : "refused: " + r.reason) << "\n";

#include <filesystem>
#include <string>
#include <vector>

#include "symtune/rules/rule_registry.h"

namespace symtune::rules {

struct PluginReport {
  std::filesystem::path path;
  bool loaded = false;
  std::string reason;                      // why it was refused (empty when loaded)
  std::string name, version, description;  // the plugin's own, once described
  std::vector<std::string> rules;          // the rules it registered
};

// The user's plugin folder ($XDG_DATA_HOME/symtune/plugins, else ~/.local/share/symtune/plugins)
// and the install's (<folder of libsymtune_engine.so>/symtune/plugins), in that order.
std::vector<std::filesystem::path> pluginFolders();

// Loads one plugin into `registry`. Refuses (loaded false, reason set) a file that is not
// directly in one of `trusted` once symbolic links are resolved, is not a regular file, is
// writable by everyone or owned by another user (nor root) — or whose folder is — that does not
// load, lacks the entry points, was built for another plugin ABI, fails its init, or registers a
// rule whose name is taken. A refused plugin registers nothing.
PluginReport loadPlugin(const std::filesystem::path& file, Registry& registry,
                        const std::vector<std::filesystem::path>& trusted = pluginFolders());

// Loads every *.so of the trusted folders (missing folders are skipped), in name order.
std::vector<PluginReport> loadPlugins(
    Registry& registry, const std::vector<std::filesystem::path>& trusted = pluginFolders());

}  // namespace symtune::rules
