// Rule packs: a pack made from rules text round-trips through its JSON; a damaged file, duplicate
// names and a source that holds another rule are refused with messages that say so; installing
// reports an upgrade, refuses a downgrade, a changed pack under the same version and a rule name
// another pack uses; the built-in pack is valid and each of its rules checks.

#include <QTemporaryDir>

#include <fstream>

#include "symtune/core/rule_pack.h"
#include "test_main.h"

using symtune::rules::RulePackError;

namespace {

const char* kRules = R"(# Halves the learning rate at step 100.
rule halve_lr { when step == 100  set lr = lr * 0.5 }

# not a description: a blank line follows

rule nan_guard { when grad_nan_count > 0  skip step }
)";

std::string messageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const RulePackError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

class TestRulePack : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void roundTrip() {
    const auto pack = symtune::rules::packFromText(kRules, "mine", "1.2.3", "my rules");
    QCOMPARE(pack.rules.size(), size_t{2});
    QCOMPARE(pack.rules[0].description, std::string("Halves the learning rate at step 100."));
    QCOMPARE(pack.rules[1].description, std::string());
    QCOMPARE(pack.rules[1].source,
             std::string("rule nan_guard { when grad_nan_count > 0  skip step }"));
    const auto back = symtune::rules::parseRulePack(symtune::rules::rulePackJson(pack), "p.json");
    QCOMPARE(back.name, pack.name);
    QCOMPARE(back.version, pack.version);
    QCOMPARE(back.description, pack.description);
    QCOMPARE(back.rules.size(), pack.rules.size());
    for (size_t i = 0; i < back.rules.size(); ++i) {
      QCOMPARE(back.rules[i].name, pack.rules[i].name);
      QCOMPARE(back.rules[i].source, pack.rules[i].source);
      QCOMPARE(back.rules[i].description, pack.rules[i].description);
    }
  }

  void damagedPacksAreRefused() {
    const auto pack = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
    std::string json = symtune::rules::rulePackJson(pack);
    std::string edited = json;
    edited.replace(edited.find("lr * 0.5"), 8, "lr * 0.9");
    QVERIFY(messageOf([&] {
              symtune::rules::parseRulePack(edited, "p.json");
            }).find("p.json: checksum fnv1a64:") == 0);
    QVERIFY(messageOf([&] {
              symtune::rules::parseRulePack(edited, "p.json");
            }).find("the file was edited or damaged") != std::string::npos);

    std::string renamed = json;
    renamed.replace(renamed.find("\"name\": \"nan_guard\""), 19, "\"name\": \"other\"    ");
    QCOMPARE(messageOf([&] { symtune::rules::parseRulePack(renamed, "p.json"); }),
             std::string("p.json: rule \"other\": its source must hold exactly that rule"));
    QCOMPARE(messageOf([&] { symtune::rules::parseRulePack("{\"format\": \"x\"}", "p.json"); }),
             std::string("p.json: not a rule pack (\"format\" is not \"symtune-rulepack\")"));
    QCOMPARE(messageOf([&] {
               symtune::rules::parseRulePack(R"({"format": "symtune-rulepack", "version": 2})",
                                             "p.json");
             }),
             std::string("p.json: rule pack format version 2; this Symtune reads version 1"));
    QCOMPARE(messageOf([] { symtune::rules::packFromText(kRules, "mine", "1.0", ""); }),
             std::string("version \"1.0\" is not MAJOR.MINOR.PATCH"));
    QVERIFY_THROWS_EXCEPTION(symtune::rules::RuleError,
                             symtune::rules::packFromText("rule a { }", "mine", "1.0.0", ""));
  }

  void packNamesCannotLeaveTheLibrary() {
    auto pack = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
    std::string json = symtune::rules::rulePackJson(pack);
    json.replace(json.find("\"name\": \"mine\""), 14, "\"name\": \"../x\"");
    QVERIFY(messageOf([&] {
              symtune::rules::parseRulePack(json, "p.json");
            }).find("p.json: pack name \"../x\" must be") == 0);
    QVERIFY_THROWS_EXCEPTION(RulePackError,
                             symtune::rules::packFromText(kRules, "/etc/x", "1.0.0", ""));
    QVERIFY_THROWS_EXCEPTION(RulePackError, symtune::rules::packFromText(kRules, "", "1.0.0", ""));
  }

  void duplicateNamesInAPackAreRefused() {
    auto pack = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
    pack.rules.push_back(pack.rules[0]);
    QCOMPARE(messageOf([&] {
               symtune::rules::parseRulePack(symtune::rules::rulePackJson(pack), "p.json");
             }),
             std::string("p.json: two rules named \"halve_lr\""));
  }

  void versions() {
    QVERIFY(symtune::rules::compareVersions("1.2.3", "1.10.0") < 0);
    QVERIFY(symtune::rules::compareVersions("2.0.0", "1.99.99") > 0);
    QCOMPARE(symtune::rules::compareVersions("0.1.0", "0.1.0"), 0);
  }

  void importReportsConflicts() {
    QTemporaryDir dir;
    const std::filesystem::path library = dir.filePath("library").toStdString();
    const auto v1 = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
    QCOMPARE(symtune::rules::importRulePack(v1, library), std::string("installed"));
    QVERIFY(std::filesystem::exists(library / "mine.json"));
    QCOMPARE(symtune::rules::importRulePack(v1, library), std::string("already installed"));

    auto changed = v1;
    changed.rules.pop_back();
    QVERIFY(messageOf([&] {
              symtune::rules::importRulePack(changed, library);
            }).find("pack \"mine\" 1.0.0 differs from the installed") == 0);

    auto v2 = changed;
    v2.version = "1.1.0";
    QCOMPARE(symtune::rules::importRulePack(v2, library), std::string("upgraded from 1.0.0"));
    QCOMPARE(symtune::rules::loadRulePack(library / "mine.json").version, std::string("1.1.0"));
    QVERIFY(messageOf([&] {
              symtune::rules::importRulePack(v1, library);
            }).find("pack \"mine\" 1.0.0 is older than the installed version 1.1.0") == 0);

    const auto other = symtune::rules::packFromText(
        "rule halve_lr { when step == 5  set lr = lr * 0.5 }", "theirs", "1.0.0", "");
    QVERIFY(messageOf([&] { symtune::rules::importRulePack(other, library); })
                .find("rule \"halve_lr\" of pack \"theirs\" is also in the installed pack "
                      "\"mine\"") == 0);
  }

  void builtinPackIsValid() {
    const auto pack =
        symtune::rules::loadRulePack(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.json");
    QCOMPARE(pack.name, std::string("builtin"));
    std::vector<std::string> names;
    for (const auto& r : pack.rules) {
      names.push_back(r.name);
      QVERIFY2(!r.description.empty(), r.name.c_str());
    }
    QCOMPARE(names,
             (std::vector<std::string>{"gradient_steering", "adaptive_gradient_clipping",
                                       "global_norm_clipping", "nan_guard", "loss_spike_guard",
                                       "tanh_gelu", "fused_bias_gelu", "fused_bias_dropout_add"}));
    // The JSON is what `symtune rules export` makes of builtin.rules.
    std::ifstream in(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.rules");
    std::stringstream text;
    text << in.rdbuf();
    const auto fromText =
        symtune::rules::packFromText(text.str(), pack.name, pack.version, pack.description);
    QCOMPARE(symtune::rules::rulePackChecksum(fromText), symtune::rules::rulePackChecksum(pack));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestRulePack)
#include "tst_rule_pack.moc"
