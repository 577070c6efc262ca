// symtune-bench's table on stderr: a few lines per model, each mode's medians and ratios.

#include <iomanip>
#include <limits>
#include <sstream>

#include "harness.h"

namespace symtune::bench {

using json = nlohmann::ordered_json;

std::string table(const json& results) {
  std::ostringstream out;
  out << std::fixed;
  for (const auto& model : results["models"]) {
    out << model["model"].get<std::string>() << " — " << model["description"].get<std::string>()
        << "\n";
    out << "  " << std::left << std::setw(14) << "mode" << std::right << std::setw(11)
        << "samples/s" << std::setw(8) << "ratio" << std::setw(11) << "step ms" << std::setw(11)
        << "peak MB" << std::setw(8) << "ratio" << std::setw(10) << "loss dev" << std::setw(10)
        << "GFLOP/s"
        << "\n";
    for (const auto& m : model["modes"]) {
      if (m.contains("refused")) {
        out << "  " << std::left << std::setw(14) << m["mode"].get<std::string>()
            << " refused: " << m["refused"].get<std::string>() << "\n"
            << std::right;
        continue;
      }
      if (m.contains("infeasible")) {
        out << "  " << std::left << std::setw(14) << m["mode"].get<std::string>()
            << " infeasible: smallest feasible budget " << std::setprecision(1)
            << m["smallest_feasible_bytes"].get<double>() / 1e6 << " MB\n"
            << std::right;
        continue;
      }
      const auto& ratio = m["ratio"];
      out << "  " << std::left << std::setw(14) << m["mode"].get<std::string>() << std::right
          << std::setprecision(1) << std::setw(11) << m["samples_per_s"]["median"].get<double>()
          << std::setprecision(3) << std::setw(8) << ratio["samples_per_s"].get<double>()
          << std::setprecision(1) << std::setw(11) << 1e3 * m["step_s"]["median"].get<double>()
          << std::setw(11) << m["peak_bytes"]["median"].get<double>() / 1e6 << std::setprecision(3)
          << std::setw(8)
          << (ratio["peak_bytes"].is_null() ? 0.0 : ratio["peak_bytes"].get<double>())
          << std::setw(10)
          << (m["loss_agreement"]["max_rel_dev"].is_number()  // null: a loss was not finite
                  ? m["loss_agreement"]["max_rel_dev"].get<double>()
                  : std::numeric_limits<double>::infinity())
          << std::setprecision(2) << std::setw(10)
          << (m["roofline"].is_null() ? 0.0 : m["roofline"]["flops_per_s"].get<double>() / 1e9)
          << "\n";
    }
  }
  return out.str();
}

}  // namespace symtune::bench
