#pragma once
// Rule packs (docs/rules.md, "Rule packs"): a versioned JSON file of rules — name, version,
// description, each rule's source text and description, and a checksum — and the user's library
// of installed packs. Part of symtune::core.
//
//   auto pack = symtune::rules::packFromText(text, "mine", "1.0.0", "my rules");
//   symtune::rules::saveRulePack("mine.json", pack);
//   auto report = symtune::rules::importRulePack(symtune::rules::loadRulePack("mine.json"),
//                                                symtune::rules::defaultLibrary());

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "symtune/core/rules.h"

namespace symtune::rules {

struct PackedRule {
  std::string name;
  std::string description;
  std::string source;  // one rule's text: `rule NAME { ... }`
};

struct RulePack {
  static constexpr int kFormatVersion = 1;
  std::string name;
  std::string version;  // MAJOR.MINOR.PATCH
  std::string description;
  std::vector<PackedRule> rules;
};

// A pack that cannot be read, written or installed. what() says which file and what is wrong.
class RulePackError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A pack of every rule in `text` (checked); the comment lines right above a rule describe it.
RulePack packFromText(const std::string& text, const std::string& name, const std::string& version,
                      const std::string& description);

// The pack as JSON, with its checksum.
std::string rulePackJson(const RulePack& pack);
// Parses and validates a pack: format and version, checksum, unique rule names, and each rule's
// source holding exactly the rule it names (parsed and type-checked). `origin` names the file in
// errors.
RulePack parseRulePack(const std::string& json, const std::string& origin);
RulePack loadRulePack(const std::filesystem::path& path);
void saveRulePack(const std::filesystem::path& path, const RulePack& pack);  // atomically

// The pack's checksum: FNV-1a (64-bit) of its rules' canonical JSON — it catches accidental
// edits, not deliberate ones.
std::string rulePackChecksum(const RulePack& pack);

// Orders "MAJOR.MINOR.PATCH" versions: negative, zero or positive. Throws RulePackError for a
// malformed version.
int compareVersions(const std::string& a, const std::string& b);

// $SYMTUNE_RULEPACKS, else $XDG_DATA_HOME/symtune/rulepacks, else ~/.local/share/symtune/rulepacks.
std::filesystem::path defaultLibrary();

// Installs `pack` into `library` as <name>.json. Refuses (RulePackError, naming both sides) a
// different pack with the same name and version, a newer installed version, a rule whose name
// another installed pack already uses, and one in `registered` (rule name → where from: the
// built-in pack's and plugins' rules, which a session would then never get from this pack). A
// file in the library that is not a pack is passed over, as the registry passes it over. Returns
// what it did: "installed", "upgraded from X", or "already installed" (the same pack: nothing
// written).
std::string importRulePack(const RulePack& pack, const std::filesystem::path& library,
                           const std::map<std::string, std::string>& registered = {});

}  // namespace symtune::rules
