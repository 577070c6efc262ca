// An example native rule plugin (docs/rules.md, "Plugins"): one C++ rule, registered with
// SYMTUNE_REGISTER_RULE when the library loads, and one rule-language rule added by the C entry
// point. Built into <build>/lib/symtune/plugins, the build tree's install plugin folder, and
// installed into <prefix>/lib/symtune/plugins (CMakeLists.txt beside it builds it on its own too).

#include <cstdint>
#include <numeric>
#include <vector>

#include "symtune/plugin_api.h"
#include "symtune/rules/rule_registry.h"

// Gradient centralization (Yong et al., 2020): each weight gradient of two or more dimensions
// (linear and convolution weights) loses its mean over every dimension but the first, so each
// output unit's gradient sums to zero.
SYMTUNE_REGISTER_RULE(gradient_centralization, "*",
                      "Subtracts from each weight gradient (2-D and up) its mean per output unit "
                      "(Yong et al., 2020). Use with SGD or Adam on convolutional and linear "
                      "layers: it regularises the weights and often speeds up early training.") {
  int64_t changed = 0;
  for (const auto& [name, parameter] : context.parameters()) {
    torch::Tensor grad = parameter.grad();
    if (grad.dim() < 2)
      continue;
    std::vector<int64_t> dims(static_cast<size_t>(grad.dim() - 1));
    std::iota(dims.begin(), dims.end(), int64_t{1});
    grad.sub_(grad.mean(dims, /*keepdim=*/true));
    ++changed;
  }
  context.gradientsChanged(changed);
  return changed > 0;
}

namespace {

const char* const kRules = R"(
# Zeroes every gradient entry under 1/1000 of the gradient's largest magnitude (per parameter).
# Use to study how much of a step the small entries carry, or before sparse communication.
rule sparsify_gradients {
  select params "*"
  let cut = 0.001 * max(abs(grad))
  set grad = where(abs(grad) < cut, 0, grad)
}
)";

}  // namespace

SYMTUNE_PLUGIN("gradient_centralization", "1.0.0",
               "Gradient centralization (a C++ rule) and gradient sparsification (a rule in the "
               "rule language)") {
  char error[512];
  return host->add_rules(host->registry, kRules, error, sizeof error);
}
