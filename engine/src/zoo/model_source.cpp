#include <sstream>

#include "symtune/zoo/model_zoo.h"

namespace symtune {

namespace {

size_t indentOf(const std::string& line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ')
    ++n;
  return n;
}

bool isBlank(const std::string& line) {
  const size_t n = indentOf(line);
  return n == line.size() || line[n] == '#';
}

}  // namespace

std::map<std::string, ClassSource> splitModelSource(const std::string& text) {
  // Note [Model source files]
  // A model file is Python: top-level `class Name(...):` blocks whose methods are TorchScript. We
  // split it by indentation rather than with TorchScript's parser because the file also holds
  // Python-only parts (`__init__`, imports) that the C++ side builds itself. Every line of a class
  // body yields one line of its text (blank for what is left out), so line numbers in TorchScript's
  // source ranges are the file's.
  std::map<std::string, ClassSource> classes;
  std::istringstream in(text);
  std::string line, current;
  ClassSource body;
  size_t methodIndent = 0;
  bool inInit = false;
  int lineNo = 0;
  auto flush = [&] {
    if (!current.empty())
      classes[current] = body;
    current.clear();
    body = ClassSource{};
    methodIndent = 0;
    inInit = false;
  };
  while (std::getline(in, line)) {
    ++lineNo;
    const size_t indent = indentOf(line);
    if (!isBlank(line) && indent == 0) {
      flush();
      if (line.rfind("class ", 0) == 0) {
        const size_t end = line.find_first_of("(:", 6);
        current = line.substr(6, end - 6);
        body.firstLine = lineNo + 1;
      }
      continue;
    }
    if (current.empty())
      continue;
    if (isBlank(line)) {
      body.text += "\n";
      continue;
    }
    if (line.compare(indent, 4, "def ") == 0 && (methodIndent == 0 || indent <= methodIndent)) {
      methodIndent = indent;
      inInit = line.compare(indent, 12, "def __init__") == 0;
    }
    body.text += inInit ? "\n" : line.substr(std::min(indent, methodIndent)) + "\n";
  }
  flush();
  return classes;
}

}  // namespace symtune
