#include "rules_command.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "symtune/rule_pack.h"

namespace symtune::app {

namespace {

std::string readText(const std::string& path) {
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

// One line per rule: name, when it runs, what it selects and does.
void describe(const std::vector<rules::Rule>& parsed) {
  for (const auto& r : parsed) {
    std::cout << "  " << r.name << ": " << (r.perParameter ? "per parameter" : "per step");
    for (const auto& s : r.selectors)
      std::cout << ", " << rules::toString(s.kind) << " \"" << s.glob << "\"";
    std::cout << ", " << r.actions.size() << (r.actions.size() == 1 ? " action" : " actions")
              << (r.trigger ? ", with a `when`" : "") << "\n";
  }
}

int check(const CommandLine& cl) {
  std::vector<rules::Rule> parsed;
  if (isPack(cl.rulesFile)) {
    const auto pack = rules::loadRulePack(cl.rulesFile);
    std::cout << cl.rulesFile << ": pack \"" << pack.name << "\" " << pack.version << ", "
              << pack.rules.size() << " rules, checksum " << rules::rulePackChecksum(pack) << "\n";
    for (const auto& r : pack.rules) {
      auto one = rules::parseRules(r.source);
      parsed.insert(parsed.end(), one.begin(), one.end());
    }
  } else {
    try {
      parsed = rules::parseRules(readText(cl.rulesFile));
    } catch (const rules::RuleError& e) {
      throw rules::RulePackError(cl.rulesFile + ":" + e.what());
    }
    std::cout << cl.rulesFile << ": " << parsed.size() << " rules\n";
  }
  describe(parsed);
  return 0;
}

int exportPack(const CommandLine& cl) {
  rules::RulePack pack;
  try {
    pack = rules::packFromText(readText(cl.rulesFile), cl.packName, cl.packVersion,
                               cl.packDescription);
  } catch (const rules::RuleError& e) {
    throw rules::RulePackError(cl.rulesFile + ":" + e.what());
  }
  rules::saveRulePack(*cl.output, pack);
  std::cout << *cl.output << ": pack \"" << pack.name << "\" " << pack.version << ", "
            << pack.rules.size() << " rules\n";
  return 0;
}

int importPack(const CommandLine& cl) {
  const auto pack = rules::loadRulePack(cl.rulesFile);
  const auto library = cl.library ? std::filesystem::path(*cl.library) : rules::defaultLibrary();
  const std::string outcome = rules::importRulePack(pack, library);
  std::cout << "pack \"" << pack.name << "\" " << pack.version << ": " << outcome << " ("
            << library.string() << ")\n";
  return 0;
}

}  // namespace

int runRulesCommand(const CommandLine& cl) {
  try {
    if (cl.rulesCommand == "check")
      return check(cl);
    if (cl.rulesCommand == "export")
      return exportPack(cl);
    return importPack(cl);
  } catch (const std::exception& e) {  // RulePackError, RuleError, filesystem errors
    std::cerr << "symtune: error: " << e.what() << std::endl;
    return 2;
  }
}

}  // namespace symtune::app
