#pragma once
// symtune::grad_stats — one pass over a gradient for the statistics that telemetry and the
// gradient rules read. Registered as the TorchScript operators symtune::grad_stats(Tensor g) ->
// Tensor and symtune::grad_stats_multi(Tensor[] grads) -> Tensor, with CPU and CUDA
// implementations.

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

namespace symtune::kernels {

// Indices into grad_stats' result: a float64 tensor of 5 on the input's device.
enum GradStat : int64_t {
  kSumSquares = 0,  // sum of g^2 over finite elements (norm = sqrt)
  kSumAbs = 1,      // sum of |g| over finite elements
  kMaxAbs = 2,      // max |g| over finite elements (0 for an empty tensor)
  kNanCount = 3,
  kInfCount = 4,
  kGradStatCount = 5,
};

// Calls the registered operator through the dispatcher. `g`: floating point, any layout.
at::Tensor gradStats(const at::Tensor& g);

// The statistics of many tensors in one call, row i for grads[i]: a float64 [n, 5] tensor on
// their device (all on one device). On the CPU all chunks of all tensors share one parallel loop;
// on CUDA one launch per tensor and no synchronisation.
at::Tensor gradStatsMulti(at::TensorList grads);

}  // namespace symtune::kernels
