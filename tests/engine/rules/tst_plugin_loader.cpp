// Native rule plugins: the example plugin loads from the user's plugin folder and its rules — one
// in C++, one in the rule language — change planted gradients as they should; the loader refuses
// files outside the plugin folders (symbolic links included), files or folders anyone can write,
// libraries without the entry points, another ABI, a failing init and rule names already taken,
// and a refused plugin registers nothing.

#include <sys/stat.h>

#include <QTemporaryDir>

#include "planted_gradients.h"
#include "symtune/rules/plugin_loader.h"
#include "symtune/rules/rule_engine.h"
#include "test_main.h"

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

}  // namespace

class TestPluginLoader : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    root_ = fs::path(tmp_.path().toStdString());
    qputenv("XDG_DATA_HOME", (root_ / "xdg").string().c_str());
    qputenv("SYMTUNE_RULEPACKS", (root_ / "library").string().c_str());
    userFolder_ = root_ / "xdg" / "symtune" / "plugins";
    fs::create_directories(userFolder_);
    fs::permissions(userFolder_, fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
  }

  void pluginFoldersAreTheUsersAndTheInstalls() {
    const auto folders = symtune::rules::pluginFolders();
    QCOMPARE(folders.size(), size_t{2});
    QCOMPARE(folders[0], userFolder_);
    // The build tree's install folder: where the example plugin is built.
    QCOMPARE(fs::canonical(folders[1]), fs::canonical(kExample.parent_path()));
  }

  void examplePluginLoadsAndItsRulesWork() {
    const auto file = install(kExample, userFolder_, kFile);
    Registry registry;
    const PluginReport report = loadPlugin(file, registry);
    QVERIFY2(report.loaded, report.reason.c_str());
    QCOMPARE(report.name, std::string("gradient_centralization"));
    QCOMPARE(report.version, std::string("1.0.0"));
    QCOMPARE(report.rules,
             (std::vector<std::string>{"gradient_centralization", "sparsify_gradients"}));
    const auto gc = registry.get("gradient_centralization");
    const auto sparsify = registry.get("sparsify_gradients");
    QVERIFY(gc.native && sparsify.rule);
    const std::string origin =
        "plugin gradient_centralization 1.0.0 (" + fs::canonical(file).string() + ")";
    QCOMPARE(gc.origin, origin);
    QCOMPARE(sparsify.origin, origin);
    QVERIFY(sparsify.description.find("1/1000") != std::string::npos);

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
    QCOMPARE(outcome.gradientsChanged, int64_t{1});
    QCOMPARE(outcome.fired, std::vector<std::string>{"gradient_centralization"});

    // Sparsification: entries under 1/1000 of the largest magnitude become zero.
    symtune::rules::RuleSet sparse;
    sparse.add(sparsify);
    std::vector<std::pair<std::string, torch::Tensor>> one{
        {"w", withGrad({0, 0, 0, 0}, {1000, 0.5f, -2, -0.99f}, {4})}};
    sparse.apply(one, features, 0.1);
    expectValues(one[0].second.grad(), {1000, 0, -2, 0});

    // The same rules again: refused, naming who has them; nothing more registered.
    const auto again = loadPlugin(file, registry);
    QVERIFY(!again.loaded);
    QVERIFY2(again.reason.find("is already registered by plugin gradient_centralization") !=
                 std::string::npos,
             again.reason.c_str());
    QCOMPARE(registry.entries().size(), size_t{2});
    // Another registry gets both, the C++ rule included (the library is loaded once).
    Registry other;
    QVERIFY(loadPlugin(file, other).loaded);
    QCOMPARE(other.entries().size(), size_t{2});
  }

  void untrustedFilesAreRefused_data() {
    QTest::addColumn<QString>("setup");
    QTest::addColumn<QString>("reason");
    QTest::addRow("outside the plugin folders") << "outside"
                                                << "not in a plugin folder (";
    QTest::addRow("a link out of the folder") << "symlink"
                                              << "it resolves to ";
    QTest::addRow("a world-writable file")
        << "world-writable file"
        << "the file is writable by everyone (mode 0666): run chmod o-w on it";
    QTest::addRow("a world-writable folder")
        << "world-writable folder"
        << "its folder is writable by everyone (mode 0777): run chmod o-w on it";
    QTest::addRow("not a plugin")
        << "no entry"
        << "not a Symtune plugin: it does not export symtune_plugin_describe and "
           "symtune_plugin_init";
    QTest::addRow("another ABI")
        << "abi"
        << "built for plugin ABI 999, this engine has 1: rebuild it against this Symtune";
    QTest::addRow("a failing init")
        << "failing init"
        << "its init failed (status 1): 1:19: expected `grad` or `lr` after `set`, found `gard`";
    QTest::addRow("no such file") << "missing"
                                  << "cannot resolve the path: ";
  }

  void untrustedFilesAreRefused() {
    QFETCH(QString, setup);
    QFETCH(QString, reason);
    const std::string what = setup.toStdString();
    const fs::path openFolder = root_ / "open";
    std::vector<fs::path> trusted{userFolder_, openFolder};
    fs::path file;
    if (what == "outside") {
      file = install(kExample, root_ / "elsewhere", kFile);
    } else if (what == "symlink") {
      const auto target = install(kExample, root_ / "elsewhere", kFile);
      file = userFolder_ / "linked.so";
      fs::remove(file);
      fs::create_symlink(target, file);
    } else if (what == "world-writable file") {
      file = install(kExample, userFolder_,
                     fs::perms::all & ~fs::perms::owner_exec & ~fs::perms::group_exec &
                         ~fs::perms::others_exec,
                     "writable.so");
    } else if (what == "world-writable folder") {
      file = install(kExample, openFolder, kFile);
      fs::permissions(openFolder, fs::perms::all);
    } else if (what == "no entry") {
      file = install(kFakes / "libsymtune_test_plugin_no_entry.so", userFolder_, kFile);
    } else if (what == "abi") {
      file = install(kFakes / "libsymtune_test_plugin_abi_999.so", userFolder_, kFile);
    } else if (what == "failing init") {
      file = install(kFakes / "libsymtune_test_plugin_failing_init.so", userFolder_, kFile);
    } else {
      file = userFolder_ / "missing.so";
    }
    if (what == "world-writable file") {
      struct stat st {};
      QCOMPARE(::stat(file.c_str(), &st), 0);
      QCOMPARE(st.st_mode & 07777, mode_t{0666});
    }
    Registry registry;
    const auto report = loadPlugin(file, registry, trusted);
    QVERIFY(!report.loaded);
    QVERIFY2(report.reason.find(reason.toStdString()) != std::string::npos, report.reason.c_str());
    QVERIFY(registry.entries().empty());
    if (what == "world-writable folder")
      fs::permissions(openFolder, fs::perms::owner_all);
    if (file.filename() != "missing.so")
      fs::remove(file);
  }

  void folderScanReportsEveryPluginInNameOrder() {
    const fs::path folder = root_ / "scan";
    install(kFakes / "libsymtune_test_plugin_no_entry.so", folder, kFile, "b.so");
    install(kExample, folder, kFile, "a.so");
    fs::permissions(folder, fs::perms::owner_all);
    Registry registry;
    const auto reports = symtune::rules::loadPlugins(registry, {root_ / "nonexistent", folder});
    QCOMPARE(reports.size(), size_t{2});
    QCOMPARE(reports[0].path.filename().string(), std::string("a.so"));
    QVERIFY2(reports[0].loaded, reports[0].reason.c_str());
    QCOMPARE(reports[1].path.filename().string(), std::string("b.so"));
    QVERIFY(!reports[1].loaded);
    QCOMPARE(registry.entries().size(), size_t{2});
  }

 private:
  QTemporaryDir tmp_;
  fs::path root_, userFolder_;
};

SYMTUNE_TEST_MAIN_CORE(TestPluginLoader)
#include "tst_plugin_loader.moc"
