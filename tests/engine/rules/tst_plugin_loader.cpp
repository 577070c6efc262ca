// Native rule plugins: the example plugin loads from the user's plugin folder and its rules — one
// in C++, one in the rule language — change planted gradients as they should; the loader refuses
// files outside the plugin folders (symbolic links included), files or folders anyone can write,
// libraries without the entry points, another ABI, a failing init and rule names already taken,
// and a refused plugin registers nothing.

#include "doctest_torch.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "planted_gradients.h"
#include "symtune/rules/plugin_loader.h"
#include "symtune/rules/rule_engine.h"
#include "test_files.h"

namespace {

namespace fs = std::filesystem;
using symtune::rules::loadPlugin;
using symtune::rules::PluginReport;
using symtune::rules::Registry;

const fs::path kExample = SYMTUNE_EXAMPLE_PLUGIN;
const fs::path kFakes = SYMTUNE_TEST_PLUGINS_DIR;

using symtune::test::expectValues;
using symtune::test::withGrad;

fs::path install(const fs::path& from, const fs::path& folder, fs::perms perms,
                 const std::string& name = "") {
  fs::create_directories(folder);
  const fs::path to = folder / (name.empty() ? from.filename().string() : name);
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::permissions(to, perms);
  return to;
}

constexpr fs::perms kFile = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read;  // 0644

// The suite's folders, made once, by the first test case that needs them: a temporary root that
// stands in for the user's data folder (XDG_DATA_HOME) and rule-pack library, with the user's
// plugin folder in it (mode 0755: nobody else can write to it, so the loader trusts it).
struct SuiteFolders {
  symtune::test::TempDir tmp;
  fs::path root = tmp.path();
  fs::path userFolder = root / "xdg" / "symtune" / "plugins";

  SuiteFolders() {
    ::setenv("XDG_DATA_HOME", (root / "xdg").c_str(), 1);
    ::setenv("SYMTUNE_RULEPACKS", (root / "library").c_str(), 1);
    fs::create_directories(userFolder);
    fs::permissions(userFolder, fs::perms::owner_all | fs::perms::group_read |
                                    fs::perms::group_exec | fs::perms::others_read |
                                    fs::perms::others_exec);
  }
};

const SuiteFolders& suiteFolders() {
  static const SuiteFolders folders;
  return folders;
}

// How a refused plugin file came to be where the loader looks.
enum class Planted {
  OutsideThePluginFolders,
  LinkOutOfTheFolder,
  WorldWritableFile,
  WorldWritableFolder,
  GroupWritableFile,
  GroupWritableFolder,
  NoEntryPoints,
  OtherAbi,
  FailingInit,
  NoSuchFile,
};

struct UntrustedFile {
  const char* name;
  Planted planted;
  const char* reason;  // what the refusal says (a part of it)
};

const UntrustedFile kUntrustedFiles[] = {
    {"outside the plugin folders", Planted::OutsideThePluginFolders, "not in a plugin folder ("},
    {"a link out of the folder", Planted::LinkOutOfTheFolder, "it resolves to "},
    {"a world-writable file", Planted::WorldWritableFile,
     "the file is writable by everyone (mode 0666): run chmod o-w on it"},
    {"a world-writable folder", Planted::WorldWritableFolder,
     "its folder is writable by everyone (mode 0777): run chmod o-w on it"},
    {"a group-writable file", Planted::GroupWritableFile,
     "the file is writable by its group (mode 0664): run chmod g-w on it"},
    {"a group-writable folder", Planted::GroupWritableFolder,
     "its folder is writable by its group (mode 0775): run chmod g-w on it"},
    {"not a plugin", Planted::NoEntryPoints,
     "not a Symtune plugin: it does not export symtune_plugin_describe and "
     "symtune_plugin_init"},
    {"another ABI", Planted::OtherAbi,
     "built for plugin ABI 999, this engine has 1: rebuild it against this Symtune"},
    {"a failing init", Planted::FailingInit,
     "its init failed (status 1): 1:19: expected `grad` or `lr` after `set`, found `gard`"},
    {"no such file", Planted::NoSuchFile, "cannot resolve the path: "},
};

// Puts the file of `planted` in place (`openFolder` is the trusted folder that a world-writable
// folder row opens to everyone) and returns its path.
fs::path plant(Planted planted, const fs::path& openFolder) {
  const SuiteFolders& folders = suiteFolders();
  switch (planted) {
    case Planted::OutsideThePluginFolders:
      return install(kExample, folders.root / "elsewhere", kFile);
    case Planted::LinkOutOfTheFolder: {
      const auto target = install(kExample, folders.root / "elsewhere", kFile);
      const fs::path link = folders.userFolder / "linked.so";
      fs::remove(link);
      fs::create_symlink(target, link);
      return link;
    }
    case Planted::WorldWritableFile:
      return install(kExample, folders.userFolder,
                     fs::perms::all & ~fs::perms::owner_exec & ~fs::perms::group_exec &
                         ~fs::perms::others_exec,
                     "writable.so");
    case Planted::WorldWritableFolder: {
      const auto file = install(kExample, openFolder, kFile);
      fs::permissions(openFolder, fs::perms::all);
      return file;
    }
    case Planted::GroupWritableFile:
      return install(kExample, folders.userFolder,
                     fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                         fs::perms::group_write | fs::perms::others_read,
                     "group.so");
    case Planted::GroupWritableFolder: {
      const auto file = install(kExample, openFolder, kFile);
      fs::permissions(openFolder, fs::perms::all & ~fs::perms::others_write);
      return file;
    }
    case Planted::NoEntryPoints:
      return install(kFakes / "libsymtune_test_plugin_no_entry.so", folders.userFolder, kFile);
    case Planted::OtherAbi:
      return install(kFakes / "libsymtune_test_plugin_abi_999.so", folders.userFolder, kFile);
    case Planted::FailingInit:
      return install(kFakes / "libsymtune_test_plugin_failing_init.so", folders.userFolder, kFile);
    case Planted::NoSuchFile:
      break;
  }
  return folders.userFolder / "missing.so";
}

}  // namespace

TEST_CASE("the plugin folders are the user's and the installation's") {
  const SuiteFolders& suite = suiteFolders();
  const auto folders = symtune::rules::pluginFolders();
  REQUIRE(folders.size() == size_t{2});
  CHECK(folders[0] == suite.userFolder);
  // The build tree's install folder: where the example plugin is built.
  CHECK(fs::canonical(folders[1]) == fs::canonical(kExample.parent_path()));
}

TEST_CASE("the example plugin loads and its rules work") {
  const auto file = install(kExample, suiteFolders().userFolder, kFile);
  Registry registry;
  const PluginReport report = loadPlugin(file, registry);
  {
    INFO(report.reason);
    REQUIRE(report.loaded);
  }
  CHECK(report.name == "gradient_centralization");
  CHECK(report.version == "1.0.0");
  CHECK(report.rules == std::vector<std::string>{"gradient_centralization", "sparsify_gradients"});
  const auto gc = registry.get("gradient_centralization");
  const auto sparsify = registry.get("sparsify_gradients");
  CHECK((gc.native && sparsify.rule));
  const std::string origin =
      "plugin gradient_centralization 1.0.0 (" + fs::canonical(file).string() + ")";
  CHECK(gc.origin == origin);
  CHECK(sparsify.origin == origin);
  CHECK(sparsify.description.find("1/1000") != std::string::npos);

  // Gradient centralization: each row of a 2-D gradient loses its mean; 1-D gradients stay.
  symtune::rules::RuleSet set;
  set.add(gc);
  std::vector<std::pair<std::string, torch::Tensor>> params{
      {"fc.weight", withGrad({0, 0, 0, 0, 0, 0}, {1, 2, 3, 4, 4, 4}, {2, 3})},
      {"fc.bias", withGrad({0, 0}, {5, -1}, {2})}};
  symtune::StepFeatures features;
  auto outcome = set.apply(params, features, 0.1);
  expectValues(params[0].second.grad(), {-1, 0, 1, 0, 0, 0});
  expectValues(params[1].second.grad(), {5, -1});
  CHECK(outcome.gradientsChanged == int64_t{1});
  CHECK(outcome.fired == std::vector<std::string>{"gradient_centralization"});

  // Sparsification: entries under 1/1000 of the largest magnitude become zero.
  symtune::rules::RuleSet sparse;
  sparse.add(sparsify);
  std::vector<std::pair<std::string, torch::Tensor>> one{
      {"w", withGrad({0, 0, 0, 0}, {1000, 0.5f, -2, -0.99f}, {4})}};
  sparse.apply(one, features, 0.1);
  expectValues(one[0].second.grad(), {1000, 0, -2, 0});

  // The same rules again: refused, naming who has them; nothing more registered.
  const auto again = loadPlugin(file, registry);
  CHECK(!again.loaded);
  {
    INFO(again.reason);
    CHECK(again.reason.find("is already registered by plugin gradient_centralization") !=
          std::string::npos);
  }
  CHECK(registry.entries().size() == size_t{2});
  // Another registry gets both, the C++ rule included (the library is loaded once).
  Registry other;
  CHECK(loadPlugin(file, other).loaded);
  CHECK(other.entries().size() == size_t{2});
}

TEST_CASE("an untrusted file is refused and registers nothing") {
  const SuiteFolders& suite = suiteFolders();
  const fs::path openFolder = suite.root / "open";
  const std::vector<fs::path> trusted{suite.userFolder, openFolder};
  for (const UntrustedFile& row : kUntrustedFiles) {
    INFO(row.name);
    const fs::path file = plant(row.planted, openFolder);
    if (row.planted == Planted::WorldWritableFile) {
      struct stat st {};
      CHECK(::stat(file.c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == mode_t{0666});
    }
    Registry registry;
    const auto report = loadPlugin(file, registry, trusted);
    CHECK(!report.loaded);
    INFO(report.reason);
    CHECK(report.reason.find(row.reason) != std::string::npos);
    CHECK(registry.entries().empty());
    // Put things back for the next row.
    if (row.planted == Planted::WorldWritableFolder || row.planted == Planted::GroupWritableFolder)
      fs::permissions(openFolder, fs::perms::owner_all);
    if (row.planted != Planted::NoSuchFile)
      fs::remove(file);
  }
}

TEST_CASE("a folder scan reports every plugin, in name order") {
  const fs::path folder = suiteFolders().root / "scan";
  install(kFakes / "libsymtune_test_plugin_no_entry.so", folder, kFile, "b.so");
  install(kExample, folder, kFile, "a.so");
  fs::permissions(folder, fs::perms::owner_all);
  Registry registry;
  const auto reports =
      symtune::rules::loadPlugins(registry, {suiteFolders().root / "nonexistent", folder});
  REQUIRE(reports.size() == size_t{2});
  CHECK(reports[0].path.filename().string() == "a.so");
  {
    INFO(reports[0].reason);
    CHECK(reports[0].loaded);
  }
  CHECK(reports[1].path.filename().string() == "b.so");
  CHECK(!reports[1].loaded);
  CHECK(registry.entries().size() == size_t{2});
}
