#include "symtune/core/features.h"

namespace symtune {

const char* featureName(Feature feature) {
  static const char* const names[kFeatureCount] = {
      "step",
      "step_time_s",
      "data_time_s",
      "forward_time_s",
      "backward_time_s",
      "optimizer_time_s",
      "samples_per_s",
      "batch_size",
      "sequence_length",
      "peak_memory_bytes",
      "live_memory_bytes",
      "allocations",
      "loss",
      "loss_delta",
      "loss_ema",
      "grad_global_norm",
      "grad_max_param_norm",
      "grad_min_param_norm",
      "grad_mean_abs",
      "grad_nan_count",
      "grad_inf_count",
      "params_without_grad",
      "update_ratio_max",
      "learning_rate",
  };
  return names[static_cast<int>(feature)];
}

std::optional<Feature> featureNamed(const std::string& name) {
  for (int f = 0; f < kFeatureCount; ++f) {
    if (name == featureName(static_cast<Feature>(f)))
      return static_cast<Feature>(f);
  }
  return std::nullopt;
}

}  // namespace symtune
