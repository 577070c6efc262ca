// writeFileAtomically: the file whole or as it was, its permissions kept, a link written through,
// nothing left behind when the writer throws.

#include "doctest_text.h"

#include <filesystem>
#include <stdexcept>
#include <string>

#include "symtune/core/atomic_file.h"
#include "test_files.h"

namespace fs = std::filesystem;

namespace {

// The names in `dir`, hidden ones included.
int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("a file replaced keeps its permissions") {
  symtune::test::TempDir dir;
  const fs::path file = dir.path() / "report.json";
  symtune::test::writeFile(file, "old");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  symtune::writeFileAtomically(file, std::string("new"));
  CHECK(symtune::test::readFile(file) == "new");
  // Before, the new file had the umask's permissions (0644): a private report became readable.
  CHECK(fs::status(file).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(entries(dir.path()) == 1);
}

TEST_CASE("a symbolic link is written through to its file") {
  symtune::test::TempDir dir;
  fs::create_directories(dir.path() / "runs");
  const fs::path target = dir.path() / "runs" / "report.json";
  symtune::test::writeFile(target, "old");
  const fs::path link = dir.path() / "latest.json";
  fs::create_symlink(fs::path("runs") / "report.json", link);
  symtune::writeFileAtomically(link, std::string("new"));
  // Before, the link was replaced by a file and its target kept the old contents.
  CHECK(fs::is_symlink(link));
  CHECK(symtune::test::readFile(target) == "new");
  CHECK(entries(dir.path() / "runs") == 1);
}

TEST_CASE("a new file is made, and a writer that throws leaves the old file and nothing else") {
  symtune::test::TempDir dir;
  const fs::path file = dir.path() / "deep" / "er" / "table.json";
  symtune::writeFileAtomically(file, std::string("first"));
  CHECK(symtune::test::readFile(file) == "first");
  CHECK_THROWS_AS(symtune::writeFileAtomically(file,
                                               [](std::ostream& out) {
                                                 out << "half";
                                                 throw std::runtime_error("stopped");
                                               }),
                  std::runtime_error);
  CHECK(symtune::test::readFile(file) == "first");
  CHECK(entries(file.parent_path()) == 1);
}
