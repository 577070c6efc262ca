#pragma once
// Files for the Qt-free suites: a temporary folder removed with everything in it when it goes out
// of scope, and whole-file reads and writes that throw with the path when they fail.
//
// The folder is removed with POSIX's nftw, not std::filesystem::remove_all: LibTorch's library
// exports a copy of libstdc++'s filesystem code, a LibTorch test binds to it, and its remove_all
// calls through a null pointer (a crash in every test that cleaned up a folder).

#include <ftw.h>
#include <stdio.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace symtune::test {

class TempDir {
 public:
  TempDir() {
    const auto base = std::filesystem::temp_directory_path() / "symtune-test-XXXXXX";
    std::string pattern = base.string();
    if (!::mkdtemp(pattern.data()))
      throw std::runtime_error("cannot make a temporary folder from " + base.string());
    path_ = pattern;
  }
  ~TempDir() {
    // Depth first (a folder after what it holds), without following links out of the folder.
    ::nftw(
        path_.c_str(),
        [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the folder, as a string (what most callers pass on).
  std::string filePath(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void writeFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text) || !out.flush())
    throw std::runtime_error("cannot write " + path.string());
}

}  // namespace symtune::test
