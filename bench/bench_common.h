#pragma once
// Small helpers the benchmarks share: medians, summaries and the machine's CPU model.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace symtune::bench {

// The whole number `text` given to `option` of `tool`, at least `least`; otherwise the tool says
// so and exits with status 2 (std::stoi aborted on "x" and took "3x" as 3).
inline int64_t wholeNumberArg(const char* tool, const std::string& option, const std::string& text,
                              int64_t least = 1) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < least) {
    std::cerr << tool << ": " << option << " needs a whole number of at least " << least
              << ", got \"" << text << "\"\n";
    std::exit(2);
  }
  return value;
}

inline double median(std::vector<double> v) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// {"median", "min", "max"} of `v`; null when it is empty.
inline nlohmann::ordered_json summary(const std::vector<double>& v) {
  if (v.empty())
    return nullptr;
  return {{"median", median(v)},
          {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

// The "model name" line of /proc/cpuinfo, or "unknown".
inline std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace symtune::bench
