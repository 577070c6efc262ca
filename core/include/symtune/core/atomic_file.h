#pragma once
// Writing a file so that a reader never sees half of it: reports, rule packs, traces, benchmark
// results and exported graphs all go through here.

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>

namespace symtune {

// Writes `text` to a temporary file in `path`'s folder (created if missing), syncs it to the disk,
// then renames it over `path` (and syncs the folder): a reader, a killed process or a lost machine
// sees the old file or the new one, whole. A file replaced keeps its permissions; a symbolic link
// is written through, to the file it names. Throws std::runtime_error with the path and the
// reason; nothing is left behind on failure.
void writeFileAtomically(const std::filesystem::path& path, const std::string& text);
// The same for what `write` writes to the stream (a model, a checkpoint): what it throws
// propagates, the temporary file removed.
void writeFileAtomically(const std::filesystem::path& path,
                         const std::function<void(std::ostream&)>& write);

// Throws std::runtime_error ("PATH: is a folder", "PATH: cannot write in FOLDER (reason)") when
// writeFileAtomically could not write `path`: checked before hours of work whose result goes
// there, not after. Creates the folder as writeFileAtomically would.
void checkWritable(const std::filesystem::path& path);

}  // namespace symtune
