#include "bindings_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "symtune/core/binding_table.h"
#include "symtune/core/session.h"

namespace symtune::app {

namespace {

std::string readAll(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw std::runtime_error(path + ": is a folder, not a session, a report or a table");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table `path` holds or names: a binding table, a report's, or a session's table file.
BindingTable tableOf(const std::string& path) {
  const std::string text = readAll(path);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  const std::string format =
      root.is_object() && root.contains("format") && root["format"].is_string()
          ? root["format"].get<std::string>()
          : "";
  if (format == "symtune-bindings")
    return BindingTable::fromJson(text, path);
  if (format == "symtune-report") {
    if (!root.contains("binding") || root["binding"].is_null())
      throw std::runtime_error(path + ": the run bound no op sites (binding was off)");
    return BindingTable::fromJson(root["binding"]["table"].dump(), path + ": binding.table");
  }
  if (format == "symtune-session") {
    const Session session = loadSession(path);
    const auto file = bindingTablePath(session);
    if (!session.binding.enabled)
      throw std::runtime_error(path + ": binding is off (binding.enabled is false)");
    if (file.empty())
      throw std::runtime_error(path +
                               ": the session keeps no binding table (binding.table is null)");
    std::ifstream probe(file);
    if (!probe)
      throw std::runtime_error(path + ": no binding table yet at " + file.string() +
                               " (run the session once)");
    return BindingTable::load(file.string());
  }
  throw std::runtime_error(path + ": expected a session, a report or a binding table, found " +
                           (format.empty() ? std::string("no \"format\"") : "\"" + format + "\""));
}

}  // namespace

int runBindingsCommand(const CommandLine& cl) {
  try {
    const BindingTable table = tableOf(cl.bindingsFile);
    std::cout << (cl.bindingsJson ? table.toJson() : table.describe());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "symtune: error: " << e.what() << std::endl;
    return 2;
  }
}

}  // namespace symtune::app
