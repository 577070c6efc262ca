#include "symtune/core/atomic_file.h"

#include <cerrno>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include <unistd.h>

namespace symtune {

void writeFileAtomically(const std::filesystem::path& path,
                         const std::function<void(std::ostream&)>& write) {
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()));
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
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error(path.string() + ": cannot replace the file (" + ec.message() + ")");
  }
}

void writeFileAtomically(const std::filesystem::path& path, const std::string& text) {
  writeFileAtomically(path, [&](std::ostream& out) { out << text; });
}

}  // namespace symtune
