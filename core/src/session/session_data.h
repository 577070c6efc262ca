#pragma once
// The session's data and loss blocks (docs/session-format.md, "Data from files" and "loss").
// Private to symtune::core: session.cpp reads and writes them through these.

#include <filesystem>

#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "symtune/core/session.h"

namespace symtune::detail {

// The folder of the session file `origin` with its links resolved, which relative paths in it
// are relative to: `link/../model.pt` in a session under `link` names the model beside the
// folder the link points at, as the shell finds it, not one beside the link. Empty for a file
// without a folder (the working one).
std::filesystem::path sessionFolder(const std::filesystem::path& origin);

// `path` as a session file whose folder (sessionFolder) is `folder` writes it: relative to the
// folder when it lies in it, so that the folder can move with its files; as it is otherwise.
std::string writtenPath(const std::filesystem::path& path, const std::filesystem::path& folder);

// The `data` block; relative file names resolve against `origin`'s folder.
DataSpec parseDataBlock(const JsonFields& data, const std::filesystem::path& origin);
LossSpec parseLossBlock(const JsonFields& loss);

// model.output and model.auxiliary_outputs of a file model, into `model`.
void parseModelOutputs(const JsonFields& fields, ModelSpec& model);
nlohmann::json outputJson(const OutputRef& ref);

// Paths as writtenPath writes them for a session file in `folder`.
nlohmann::json dataJson(const DataSpec& data, const std::filesystem::path& folder);
nlohmann::json lossJson(const LossSpec& loss);

}  // namespace symtune::detail
