#pragma once
// What a command reads and writes, so that it never writes over a file it reads or another it
// writes (symtune-runner's --batch, graph and tune; symtune's rules export).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "symtune/core/session.h"

namespace symtune::app {

// A file named as the user gave it: the option or session field ("--report", "model.file").
struct NamedFile {
  std::string name;
  std::filesystem::path path;
};

// The files a run of `session` reads: the session file itself (`sessionPath`), model.file, and
// its data files.
std::vector<NamedFile> sessionInputs(const Session& session, const std::string& sessionPath);

// "--report and model.file are one file, /abs/path: each needs its own" for the first of
// `written` that is one file with a file of `written` before it or with one of `read` (compared
// as absolute paths, symbolic links resolved); nullopt when none is.
std::optional<std::string> sharedFile(const std::vector<NamedFile>& written,
                                      const std::vector<NamedFile>& read);

}  // namespace symtune::app
