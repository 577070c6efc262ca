// Rule packs: a pack made from rules text round-trips through its JSON; a damaged file, duplicate
// names and a source that holds another rule are refused with messages that say so; installing
// reports an upgrade, refuses a downgrade, a changed pack under the same version and a rule name
// another pack or the registry (built-in, plugins) has; the built-in pack is valid and each of
// its rules checks.

#include "doctest_text.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "symtune/core/rule_pack.h"
#include "test_files.h"

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

// The start of `message` as long as `prefix`: `CHECK(openingOf(m, p) == p)` tests that m begins
// with p and, failing, prints what it began with instead.
std::string openingOf(const std::string& message, const std::string& prefix) {
  return message.substr(0, prefix.size());
}

}  // namespace

TEST_CASE("a pack made from rules text round-trips through its JSON") {
  const auto pack = symtune::rules::packFromText(kRules, "mine", "1.2.3", "my rules");
  REQUIRE(pack.rules.size() == 2);
  CHECK(pack.rules[0].description == "Halves the learning rate at step 100.");
  CHECK(pack.rules[1].description == "");
  CHECK(pack.rules[1].source == "rule nan_guard { when grad_nan_count > 0  skip step }");
  const auto back = symtune::rules::parseRulePack(symtune::rules::rulePackJson(pack), "p.json");
  CHECK(back.name == pack.name);
  CHECK(back.version == pack.version);
  CHECK(back.description == pack.description);
  REQUIRE(back.rules.size() == pack.rules.size());
  for (size_t i = 0; i < back.rules.size(); ++i) {
    INFO("rule ", i);
    CHECK(back.rules[i].name == pack.rules[i].name);
    CHECK(back.rules[i].source == pack.rules[i].source);
    CHECK(back.rules[i].description == pack.rules[i].description);
  }
}

// A rule after another on the same line is not the one the comment above that line is about.
TEST_CASE("a rule that does not begin its line has no description") {
  const auto pack = symtune::rules::packFromText(
      "# Skips when the loss is NaN.\n"
      "rule a { when step == 2  skip step } rule b { when step == 3  skip step }\n"
      "   rule c { when step == 4  skip step }\n",
      "two", "1.0.0", "");
  REQUIRE(pack.rules.size() == 3);
  CHECK(pack.rules[0].description == "Skips when the loss is NaN.");
  CHECK(pack.rules[1].description == "");
  CHECK(pack.rules[2].description == "");  // the line above is a rule, not a comment
}

TEST_CASE("damaged packs are refused with a message that says what is wrong") {
  const auto pack = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
  std::string json = symtune::rules::rulePackJson(pack);
  std::string edited = json;
  edited.replace(edited.find("lr * 0.5"), 8, "lr * 0.9");
  const std::string editedMessage =
      messageOf([&] { symtune::rules::parseRulePack(edited, "p.json"); });
  CHECK(openingOf(editedMessage, "p.json: checksum fnv1a64:") == "p.json: checksum fnv1a64:");
  CHECK_MESSAGE(editedMessage.find("the file was edited or damaged") != std::string::npos,
                editedMessage);

  std::string renamed = json;
  renamed.replace(renamed.find("\"name\": \"nan_guard\""), 19, "\"name\": \"other\"    ");
  CHECK(messageOf([&] { symtune::rules::parseRulePack(renamed, "p.json"); }) ==
        "p.json: rule \"other\": its source must hold exactly that rule");
  CHECK(messageOf([&] { symtune::rules::parseRulePack("{\"format\": \"x\"}", "p.json"); }) ==
        "p.json: not a rule pack (\"format\" is not \"symtune-rulepack\")");
  CHECK(messageOf([&] {
          symtune::rules::parseRulePack(R"({"format": "symtune-rulepack", "version": 2})",
                                        "p.json");
        }) == "p.json: rule pack format version 2; this Symtune reads version 1");
  CHECK(messageOf([] { symtune::rules::packFromText(kRules, "mine", "1.0", ""); }) ==
        "version \"1.0\" is not MAJOR.MINOR.PATCH");
  CHECK(messageOf([] { symtune::rules::packFromText(kRules, "mine", "01.0.0", ""); }) ==
        "version \"01.0.0\" is not MAJOR.MINOR.PATCH");  // it would order as 1.0.0
  CHECK(messageOf([] { symtune::rules::packFromText(kRules, "mine", "1.2.3.", ""); }) ==
        "version \"1.2.3.\" is not MAJOR.MINOR.PATCH");  // read as 1.2.3 before
  // A "format" that is no string was nlohmann's type_error, naming no file: one such file in the
  // library stopped every import.
  CHECK(messageOf([&] { symtune::rules::parseRulePack("{\"format\": 1}", "p.json"); }) ==
        "p.json: not a rule pack (\"format\" is not \"symtune-rulepack\")");
  // A format version past int's range read as 1 once narrowed.
  CHECK(messageOf([&] {
          symtune::rules::parseRulePack(R"({"format": "symtune-rulepack", "version": 4294967297})",
                                        "p.json");
        }) == "p.json: rule pack format version 4294967297; this Symtune reads version 1");

  std::string twice = json;  // JSON keeps the last: the first would pass unseen
  twice.replace(twice.find("\"name\": \"mine\""), 14, "\"name\": \"mine\", \"name\": \"other\"");
  CHECK(messageOf([&] { symtune::rules::parseRulePack(twice, "p.json"); }) ==
        "p.json: name: given twice in one object (JSON keeps only the last): say it once");
  std::string numbered = json;
  numbered.replace(numbered.find("\"description\": \"\""), 17, "\"description\": 5");
  CHECK(messageOf([&] { symtune::rules::parseRulePack(numbered, "p.json"); }) ==
        "p.json: field \"description\" must be a string");
  CHECK_THROWS_AS(symtune::rules::packFromText("rule a { }", "mine", "1.0.0", ""),
                  symtune::rules::RuleError);
}

// Text that is not UTF-8 (a Latin-1 comment) passed `rules check` and failed `rules export` with
// nlohmann's type_error 316; a CRLF file's descriptions kept their `\r`.
TEST_CASE("rules text that is not UTF-8 is refused where it is; CRLF line ends are dropped") {
  CHECK(messageOf([] {
          symtune::rules::packFromText("# caf\xE9\nrule a { when loss > 1  skip step }", "mine",
                                       "1.0.0", "");
        }) == "line 1, column 6: not UTF-8 text (a pack is JSON, which holds UTF-8 only)");
  const auto pack = symtune::rules::packFromText(
      "# Halves the lr\r\n# at step 100\r\nrule h { when step == 100  set lr = lr * 0.5 }\r\n",
      "mine", "1.0.0", "");
  REQUIRE(pack.rules.size() == 1);
  CHECK(pack.rules[0].description == "Halves the lr at step 100");
  const auto utf8 = symtune::rules::packFromText(
      "# caf\xC3\xA9 \xE2\x82\xAC\nrule a { when loss > 1  skip step }", "mine", "1.0.0", "");
  CHECK(utf8.rules[0].description == "caf\xC3\xA9 \xE2\x82\xAC");
  // The pack's own description too: `--description caf\xE9` ended in nlohmann's type_error 316.
  CHECK(messageOf([] {
          symtune::rules::packFromText("rule a { when loss > 1  skip step }", "mine", "1.0.0",
                                       "caf\xE9");
        }) == "the description, column 4: not UTF-8 text (a pack is JSON, which holds UTF-8 only)");
}

TEST_CASE("a pack's name cannot lead out of the library folder") {
  auto pack = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
  std::string json = symtune::rules::rulePackJson(pack);
  json.replace(json.find("\"name\": \"mine\""), 14, "\"name\": \"../x\"");
  const std::string prefix = "p.json: pack name \"../x\" must be";
  CHECK(openingOf(messageOf([&] { symtune::rules::parseRulePack(json, "p.json"); }), prefix) ==
        prefix);
  CHECK_THROWS_AS(symtune::rules::packFromText(kRules, "/etc/x", "1.0.0", ""), RulePackError);
  CHECK_THROWS_AS(symtune::rules::packFromText(kRules, "", "1.0.0", ""), RulePackError);
}

TEST_CASE("two rules of the same name in a pack are refused") {
  auto pack = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
  pack.rules.push_back(pack.rules[0]);
  CHECK(messageOf([&] {
          symtune::rules::parseRulePack(symtune::rules::rulePackJson(pack), "p.json");
        }) == "p.json: two rules named \"halve_lr\"");
}

TEST_CASE("versions compare by number, part by part") {
  CHECK(symtune::rules::compareVersions("1.2.3", "1.10.0") < 0);
  CHECK(symtune::rules::compareVersions("2.0.0", "1.99.99") > 0);
  CHECK(symtune::rules::compareVersions("0.1.0", "0.1.0") == 0);
}

TEST_CASE(
    "installing reports an upgrade and refuses a downgrade, a changed pack and a taken name") {
  symtune::test::TempDir dir;
  const std::filesystem::path library = dir.path() / "library";
  const auto v1 = symtune::rules::packFromText(kRules, "mine", "1.0.0", "");
  CHECK(symtune::rules::importRulePack(v1, library) == "installed");
  CHECK(std::filesystem::exists(library / "mine.json"));
  CHECK(symtune::rules::importRulePack(v1, library) == "already installed");

  auto changed = v1;
  changed.rules.pop_back();
  const std::string differs = "pack \"mine\" 1.0.0 differs from the installed";
  CHECK(openingOf(messageOf([&] { symtune::rules::importRulePack(changed, library); }), differs) ==
        differs);

  auto v2 = changed;
  v2.version = "1.1.0";
  CHECK(symtune::rules::importRulePack(v2, library) == "upgraded from 1.0.0");
  CHECK(symtune::rules::loadRulePack(library / "mine.json").version == "1.1.0");
  const std::string older = "pack \"mine\" 1.0.0 is older than the installed version 1.1.0";
  CHECK(openingOf(messageOf([&] { symtune::rules::importRulePack(v1, library); }), older) == older);

  const auto other = symtune::rules::packFromText(
      "rule halve_lr { when step == 5  set lr = lr * 0.5 }", "theirs", "1.0.0", "");
  const std::string taken =
      "rule \"halve_lr\" of pack \"theirs\" is also in the installed pack \"mine\"";
  CHECK(openingOf(messageOf([&] { symtune::rules::importRulePack(other, library); }), taken) ==
        taken);

  // A rule the registry has from elsewhere (the built-in pack, a plugin) is taken too; a file in
  // the library that is not a pack is passed over, as the registry passes it over.
  std::ofstream(library / "junk.json") << "not a pack";
  const auto third = symtune::rules::packFromText("rule nan_guard { when loss > 1  skip step }",
                                                  "third", "1.0.0", "");
  const std::string builtin =
      "rule \"nan_guard\" of pack \"third\" is already registered by pack builtin 1.3.0";
  CHECK(openingOf(
            messageOf([&] {
              symtune::rules::importRulePack(third, library, {{"nan_guard", "pack builtin 1.3.0"}});
            }),
            builtin) == builtin);
  CHECK(symtune::rules::importRulePack(third, library) == "installed");

  // A file of the pack's name that holds no earlier version of it is not overwritten.
  std::ofstream(library / "fourth.json") << "{\"my\": \"notes\"}";
  const auto fourth =
      symtune::rules::packFromText("rule r4 { when loss > 9  skip step }", "fourth", "1.0.0", "");
  const std::string kept = (library / "fourth.json").string() +
                           " is there and holds no earlier version of pack \"fourth\"";
  CHECK(openingOf(messageOf([&] { symtune::rules::importRulePack(fourth, library); }), kept) ==
        kept);
  CHECK(symtune::test::readFile((library / "fourth.json").string()) == "{\"my\": \"notes\"}");
}

TEST_CASE("the built-in pack is valid and is what its rules text exports to") {
  const auto pack =
      symtune::rules::loadRulePack(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.json");
  CHECK(pack.name == "builtin");
  std::vector<std::string> names;
  for (const auto& r : pack.rules) {
    names.push_back(r.name);
    INFO(r.name);
    CHECK(!r.description.empty());
  }
  CHECK(names == std::vector<std::string>{"gradient_steering", "adaptive_gradient_clipping",
                                          "global_norm_clipping", "nan_guard", "loss_spike_guard",
                                          "tanh_gelu", "fused_bias_gelu",
                                          "fused_bias_dropout_add"});
  // The JSON is what `symtune rules export` makes of builtin.rules.
  const std::string text =
      symtune::test::readFile(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.rules");
  const auto fromText =
      symtune::rules::packFromText(text, pack.name, pack.version, pack.description);
  CHECK(symtune::rules::rulePackChecksum(fromText) == symtune::rules::rulePackChecksum(pack));
}
