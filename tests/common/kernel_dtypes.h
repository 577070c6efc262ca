#pragma once
// The floating dtypes every kernel's reference table runs: float32, float64 and bfloat16 (math in
// float32), with the names the rows carry.

#include <torch/types.h>

#include <utility>
#include <vector>

namespace symtune::test {

inline std::vector<std::pair<const char*, torch::Dtype>> kernelDtypes() {
  return {
      {"float32", torch::kFloat32}, {"float64", torch::kFloat64}, {"bfloat16", torch::kBFloat16}};
}

}  // namespace symtune::test
