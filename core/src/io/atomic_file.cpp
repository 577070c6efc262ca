#include "symtune/core/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace symtune {

namespace {

// Asks the kernel to put `path` (a file or a folder) on the disk; false when it could not.
bool synced(const std::filesystem::path& path, bool folder) {
  const int fd = ::open(path.c_str(), folder ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void writeFileAtomically(const std::filesystem::path& given,
                         const std::function<void(std::ostream&)>& write) {
  std::error_code ec;
  // A link is written through, to the file it names (renamed over, the link itself became the
  // file and its target kept the old contents).
  std::filesystem::path path = given;
  if (std::filesystem::is_symlink(given, ec)) {
    const auto target = std::filesystem::weakly_canonical(given, ec);
    if (!ec)
      path = target;
  }
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(dir, ec);
  // Its own name per call: two threads writing one file do not write one temporary file.
  static std::atomic<uint64_t> calls{0};
  const auto tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()) +
                          "." + std::to_string(calls.fetch_add(1)));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw std::runtime_error(path.string() + ": cannot write (" +
                               std::generic_category().message(errno) + ")");
    }
    try {
      write(out);
    } catch (...) {
      out.close();
      std::filesystem::remove(tmp, ec);
      throw;
    }
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      throw std::runtime_error(path.string() + ": write failed");
    }
  }
  // The file replaced keeps its permissions (a report kept private stays so).
  const auto old = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_regular_file(old))
    std::filesystem::permissions(tmp, old.permissions(), ec);
  // On the disk before it replaces the old file, and the rename with it: a machine that loses
  // power keeps the old file or the new, whole.
  if (!synced(tmp, false)) {
    const int error = errno;  // before remove() sets it
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error(path.string() + ": cannot sync the file to disk (" +
                             std::generic_category().message(error) + ")");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string reason = ec.message();  // before remove() reuses ec
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error(path.string() + ": cannot replace the file (" + reason + ")");
  }
  synced(dir, true);  // the rename itself; a folder that cannot be synced still holds the file
}

void checkWritable(const std::filesystem::path& path) {
  if (path.empty() || !path.has_filename())
    throw std::runtime_error("\"" + path.string() + "\": not a file name");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error(path.string() + ": is a folder");
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error(path.string() + ": cannot create the folder " + dir.string() + " (" +
                             ec.message() + ")");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error(path.string() + ": cannot write in " + dir.string() + " (" +
                             std::generic_category().message(errno) + ")");
}

void writeFileAtomically(const std::filesystem::path& path, const std::string& text) {
  writeFileAtomically(path, [&](std::ostream& out) { out << text; });
}

}  // namespace symtune
