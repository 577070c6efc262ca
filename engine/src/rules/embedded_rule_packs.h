#pragma once
// The rule packs compiled into the engine (resources/rulepacks/*.json, embedded by
// cmake/EmbedText.cmake): the built-in pack works wherever the engine library goes.

#include <string>

namespace symtune {

// The text of the embedded pack file `file` ("builtin.json"). Throws std::out_of_range.
const std::string& embeddedRulePack(const std::string& file);

}  // namespace symtune
