#include "run_files.h"

#include <system_error>

namespace symtune::app {

std::vector<NamedFile> sessionInputs(const Session& session, const std::string& sessionPath) {
  std::vector<NamedFile> read{{"the session", sessionPath}};
  if (!session.model.file.empty())
    read.push_back({"model.file", session.model.file});
  const DataFilesSpec& data = session.data.files;
  if (!data.file.empty())
    read.push_back({"data.file", data.file});
  if (data.format == "npy") {
    for (const auto& group : data.inputs) {
      for (const auto& name : group)
        read.push_back({"data.inputs", name});
    }
    if (!data.target.empty())
      read.push_back({"data.target", data.target});
    if (!data.lengths.empty())
      read.push_back({"data.lengths", data.lengths});
  }
  return read;
}

std::optional<std::string> sharedFile(const std::vector<NamedFile>& written,
                                      const std::vector<NamedFile>& read) {
  const auto canonical = [](const std::filesystem::path& p) {
    std::error_code ec;
    const auto c = std::filesystem::weakly_canonical(p, ec);
    return ec ? std::filesystem::path() : c;
  };
  for (size_t i = 0; i < written.size(); ++i) {
    const auto a = canonical(written[i].path);
    if (a.empty())
      continue;
    std::vector<NamedFile> others(written.begin(), written.begin() + static_cast<ptrdiff_t>(i));
    others.insert(others.end(), read.begin(), read.end());
    for (const NamedFile& other : others) {
      if (canonical(other.path) == a)
        return written[i].name + " and " + other.name + " are one file, " + a.string() +
               ": each needs its own";
    }
  }
  return std::nullopt;
}

}  // namespace symtune::app
