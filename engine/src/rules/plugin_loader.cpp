#include "symtune/rules/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "symtune/plugin_api.h"

namespace symtune::rules {

// Note [Plugin trust]
// A plugin runs with the user's rights inside the training process, so the engine loads one only
// from the two plugin folders, after resolving symbolic links (a link in the folder that points
// elsewhere is refused), and only when neither the file nor its folder can be changed by anyone
// but the user or root: writable neither by everyone nor by a group (until 2026-12-07 a group's
// members could), owned by the user or by root. The checks and
// dlopen run on the resolved path; between them only the user or root could swap the file. A
// loaded library is never unloaded — C++ rules registered from it point into its code — and its
// static initializers (SYMTUNE_REGISTER_RULE) run when it loads, before its ABI is checked.

namespace {

namespace fs = std::filesystem;

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Empty when `path` (a file or its folder, per `what`) may be trusted; else why not.
std::string untrusted(const fs::path& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return std::string("cannot stat ") + what + ": " + std::strerror(errno);
  if (st.st_mode & S_IWOTH)
    return std::string(what) + " is writable by everyone (mode " + octal(st.st_mode) +
           "): run chmod o-w on it";
  if (st.st_mode & S_IWGRP)
    return std::string(what) + " is writable by its group (mode " + octal(st.st_mode) +
           "): run chmod g-w on it";
  if (st.st_uid != ::getuid() && st.st_uid != 0)
    return std::string(what) + " is owned by uid " + std::to_string(st.st_uid) +
           ", neither you nor root";
  return {};
}

// What symtune_plugin_host::add_rules points at: a staging registry and the plugin's origin.
struct Staging {
  Registry registry;
  std::string origin;
};

int addRules(void* registry, const char* source, char* error, size_t errorSize) {
  auto* staging = static_cast<Staging*>(registry);
  std::string message;
  try {
    if (source == nullptr)
      throw RegistryError("add_rules got no source");
    // As a pack, so the comment lines right above a rule become its description.
    staging->registry.addPack(packFromText(source, "plugin", "0.0.0", ""), staging->origin);
    return 0;
  } catch (const std::exception& e) {
    message = e.what();
  }
  if (error != nullptr && errorSize > 0)
    std::snprintf(error, errorSize, "%s", message.c_str());
  staging->registry.addProblem(message);
  return 1;
}

}  // namespace

std::vector<fs::path> pluginFolders() {
  std::vector<fs::path> folders;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
    folders.push_back(fs::path(xdg) / "symtune" / "plugins");
  else if (const char* home = std::getenv("HOME"); home && *home)
    folders.push_back(fs::path(home) / ".local" / "share" / "symtune" / "plugins");
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&pluginFolders), &info) != 0 && info.dli_fname)
    // Normalized: an installed runner loads the engine through $ORIGIN/../../lib.
    folders.push_back(
        (fs::path(info.dli_fname).parent_path() / "symtune" / "plugins").lexically_normal());
  return folders;
}

PluginReport loadPlugin(const fs::path& file, Registry& registry,
                        const std::vector<fs::path>& trusted) {
  PluginReport report;
  report.path = file;
  auto refuse = [&](std::string reason) {
    report.reason = std::move(reason);
    return report;
  };

  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  if (ec)
    return refuse("cannot resolve the path: " + ec.message());
  const bool inFolder = std::any_of(trusted.begin(), trusted.end(), [&](const fs::path& folder) {
    std::error_code e;
    const fs::path f = fs::canonical(folder, e);
    return !e && real.parent_path() == f;
  });
  if (!inFolder) {
    std::string folders;
    for (const auto& f : trusted)
      folders += (folders.empty() ? "" : ", ") + f.string();
    return refuse("not in a plugin folder (" + folders + ")" +
                  (real != fs::absolute(file) ? ": it resolves to " + real.string() : ""));
  }
  if (!fs::is_regular_file(real, ec))
    return refuse("not a regular file");
  if (auto why = untrusted(real, "the file"); !why.empty())
    return refuse(why);
  if (auto why = untrusted(real.parent_path(), "its folder"); !why.empty())
    return refuse(why);

  // C++ rules registered before the plugin loads are not the plugin's: the global registry takes
  // them first (Note [Plugin trust]: the plugin's own register while dlopen runs).
  Registry::global();
  std::vector<std::pair<NativeRule, std::string>> natives;
  void* handle = nullptr;
  {
    // dlopen of a library already loaded returns it without running its initializers again: the
    // C++ rules it registered the first time are kept per library for later registries.
    static std::mutex mutex;
    static std::map<void*, std::vector<std::pair<NativeRule, std::string>>> loaded;
    std::lock_guard<std::mutex> lock(mutex);
    handle = ::dlopen(real.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto fresh = Registry::takeStaticRegistrations();
    if (handle == nullptr) {
      const char* why = ::dlerror();
      return refuse(std::string("does not load: ") + (why ? why : "unknown error"));
    }
    auto& mine = loaded[handle];
    for (auto& n : fresh)
      mine.push_back(std::move(n));
    natives = mine;
  }
  auto describe =
      reinterpret_cast<symtune_plugin_describe_fn>(::dlsym(handle, "symtune_plugin_describe"));
  auto init = reinterpret_cast<symtune_plugin_init_fn>(::dlsym(handle, "symtune_plugin_init"));
  if (describe == nullptr || init == nullptr)
    return refuse(
        "not a Symtune plugin: it does not export symtune_plugin_describe and symtune_plugin_init");
  const symtune_plugin_info* info = describe();
  if (info == nullptr)
    return refuse("symtune_plugin_describe returned nothing");
  if (info->abi != SYMTUNE_PLUGIN_ABI)
    return refuse("built for plugin ABI " + std::to_string(info->abi) + ", this engine has " +
                  std::to_string(SYMTUNE_PLUGIN_ABI) + ": rebuild it against this Symtune");
  report.name = info->name ? info->name : "";
  report.version = info->version ? info->version : "";
  report.description = info->description ? info->description : "";

  Staging staging;
  staging.origin = "plugin " + (report.name.empty() ? real.filename().string() : report.name) +
                   " " + report.version + " (" + real.string() + ")";
  try {
    for (auto& [rule, origin] : natives)
      staging.registry.addNative(rule, staging.origin);
  } catch (const std::exception& e) {
    return refuse(e.what());
  }
  const symtune_plugin_host host{SYMTUNE_PLUGIN_ABI, &staging, &addRules};
  int status = 0;
  try {
    status = init(&host);
  } catch (const std::exception& e) {
    return refuse(std::string("its init threw: ") + e.what());
  }
  if (status != 0) {
    const auto problems = staging.registry.problems();
    return refuse("its init failed (status " + std::to_string(status) + ")" +
                  (problems.empty() ? std::string() : ": " + problems.back()));
  }
  std::vector<std::string> names;
  for (const auto& e : staging.registry.entries())
    names.push_back(e.name);
  try {
    registry.merge(staging.registry);
  } catch (const std::exception& e) {
    return refuse(e.what());
  }
  report.rules = std::move(names);
  report.loaded = true;
  return report;
}

std::vector<PluginReport> loadPlugins(Registry& registry, const std::vector<fs::path>& trusted) {
  std::vector<PluginReport> reports;
  for (const auto& folder : trusted) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".so")
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files)
      reports.push_back(loadPlugin(f, registry, trusted));
  }
  return reports;
}

}  // namespace symtune::rules
