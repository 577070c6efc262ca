#include "rules_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "run_files.h"
#include "symtune/core/rule_pack.h"

namespace symtune::app {

namespace {

std::string readText(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw rules::RulePackError(path + ": is a folder, not a rules file or a pack");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw rules::RulePackError(path + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool isPack(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}

bool rewrites(const rules::Rule& r) {
  for (const auto& a : r.actions) {
    if (a.kind == rules::Action::Kind::Rewrite)
      return true;
  }
  return false;
}

// "1 rule", "3 rules".
std::string counted(size_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// One line per rule: name, when it runs, what it selects and does.
void describe(const std::vector<rules::Rule>& parsed, bool irChecked) {
  for (const auto& r : parsed) {
    std::cout << "  " << r.name << ": "
              << (rewrites(r) ? (irChecked ? "rewrite (IR checked)" : "rewrite (IR not checked)")
                  : r.perParameter ? "per parameter"
                                   : "per step");
    for (const auto& s : r.selectors)
      std::cout << ", " << rules::toString(s.kind) << " \"" << s.glob << "\"";
    std::cout << ", " << counted(r.actions.size(), "action") << (r.trigger ? ", with a `when`" : "")
              << "\n";
  }
}

std::vector<rules::Rule> rulesOf(const rules::RulePack& pack) {
  std::vector<rules::Rule> parsed;
  for (const auto& r : pack.rules) {
    auto one = rules::parseRules(r.source);
    parsed.insert(parsed.end(), one.begin(), one.end());
  }
  return parsed;
}

// The rules of a pack or a rules file (checked by the front end); `header` gets the first line.
std::vector<rules::Rule> readRules(const CommandLine& cl, std::string* header) {
  std::vector<rules::Rule> parsed;
  if (isPack(cl.rulesFile)) {
    const auto pack = rules::loadRulePack(cl.rulesFile);
    *header = cl.rulesFile + ": pack \"" + pack.name + "\" " + pack.version + ", " +
              counted(pack.rules.size(), "rule") + ", checksum " + rules::rulePackChecksum(pack);
    parsed = rulesOf(pack);
  } else {
    try {
      parsed = rules::parseRules(readText(cl.rulesFile));
    } catch (const rules::RuleError& e) {
      throw rules::RulePackError(cl.rulesFile + ":" + e.what());
    }
    *header = cl.rulesFile + ": " + counted(parsed.size(), "rule");
  }
  return parsed;
}

// Each rewrite's IR, where the engine is at hand to check it; `file` names the rules in errors.
void checkIr(const std::string& file, const std::vector<rules::Rule>& parsed,
             const RewriteCheck& checkRewrites) {
  if (!checkRewrites)
    return;
  for (const auto& r : parsed) {
    try {
      checkRewrites(r);
    } catch (const rules::RuleError& e) {
      // A pack's positions are within the rule's own source; a file's are the file's.
      throw rules::RulePackError(file + ": rule `" + r.name + "`: " + e.what());
    }
  }
}

int check(const CommandLine& cl, const RewriteCheck& checkRewrites) {
  std::string header;
  const auto parsed = readRules(cl, &header);
  checkIr(cl.rulesFile, parsed, checkRewrites);
  std::cout << header << "\n";
  describe(parsed, static_cast<bool>(checkRewrites));
  return 0;
}

// A pack holding a rewrite whose IR does not parse is refused when written and when installed:
// the registry skips such a pack whole at run time, its good rules with it.
int exportPack(const CommandLine& cl, const RewriteCheck& checkRewrites) {
  // A pack is read back as one by its .json name (rules check, isPack); and not over its source.
  if (std::filesystem::path(*cl.output).extension() != ".json")
    throw rules::RulePackError(*cl.output +
                               ": a pack's file name ends in .json (rules check reads any other "
                               "as a rules file)");
  if (const auto why = sharedFile({{"--output", *cl.output}}, {{"the rules file", cl.rulesFile}}))
    throw rules::RulePackError(*why);
  rules::RulePack pack;
  try {
    pack = rules::packFromText(readText(cl.rulesFile), cl.packName, cl.packVersion,
                               cl.packDescription);
  } catch (const rules::RuleError& e) {
    throw rules::RulePackError(cl.rulesFile + ":" + e.what());
  }
  checkIr(cl.rulesFile, rulesOf(pack), checkRewrites);
  rules::saveRulePack(*cl.output, pack);
  std::cout << *cl.output << ": pack \"" << pack.name << "\" " << pack.version << ", "
            << counted(pack.rules.size(), "rule") << "\n";
  return 0;
}

int importPack(const CommandLine& cl, const RewriteCheck& checkRewrites,
               const RegisteredRules& registered) {
  const auto pack = rules::loadRulePack(cl.rulesFile);
  checkIr(cl.rulesFile, rulesOf(pack), checkRewrites);
  const auto library = cl.library ? std::filesystem::path(*cl.library) : rules::defaultLibrary();
  const std::string outcome = rules::importRulePack(
      pack, library, registered ? registered() : RegisteredRules::result_type{});
  std::cout << "pack \"" << pack.name << "\" " << pack.version << ": " << outcome << " ("
            << library.string() << ")\n";
  return 0;
}

}  // namespace

bool needsRewriteCheck(const CommandLine& cl) {
  if (cl.rulesCommand != "check" && cl.rulesCommand != "export")
    return false;
  try {
    std::string header;
    const auto parsed = readRules(cl, &header);
    return std::any_of(parsed.begin(), parsed.end(), rewrites);
  } catch (const std::exception&) {
    return false;  // the front end reports it
  }
}

int runRulesCommand(const CommandLine& cl, const RewriteCheck& checkRewrites,
                    const RegisteredRules& registered) {
  try {
    if (cl.rulesCommand == "check")
      return check(cl, checkRewrites);
    if (cl.rulesCommand == "export")
      return exportPack(cl, checkRewrites);
    if (cl.rulesCommand == "list")
      throw std::runtime_error(
          "rules list needs symtune-runner next to symtune (the registry "
          "is the engine's)");
    return importPack(cl, checkRewrites, registered);
  } catch (const std::exception& e) {  // RulePackError, RuleError, filesystem errors
    std::cerr << "symtune: error: " << e.what() << std::endl;
    return 2;
  }
}

}  // namespace symtune::app
