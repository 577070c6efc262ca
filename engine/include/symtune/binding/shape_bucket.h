#pragma once
// Shape buckets (docs/binding.md, "Buckets"): the key under which a site's binding is kept, so a
// new shape rarely costs a new measurement. Every dimension is rounded up to a power of two, so a
// dynamic dimension ranging over [lo, hi] meets at most ceil(log2(hi / lo)) + 1 buckets; a static
// one meets one. The built-in candidates compute on the real shapes (the bucket is a cache key
// only: no padding).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/stack.h>

namespace symtune::binding {

// The bucket a dimension falls in: 0, 1, 2, then the power of two at or above it (the size
// itself above 2^62, where there is none).
int64_t bucketDim(int64_t size);

// "float32 [32,<=64,768] x<=64": the dtype and device of the first tensor input, each tensor
// input's bucketed shape, the loop's trip bound when `trips` >= 0 ("x?" for a while loop, whose
// bound TorchScript gives as INT64_MAX), and " nograd" when no gradient flows (grad mode off or
// no input requiring grad).
std::string bucketKey(const torch::jit::Stack& inputs, size_t count, int64_t trips);

// A batch's bucket: bucketKey of its inputs, and each int input rounded up to a power of two (an
// int can set the step's shapes as much as a tensor: Transformer-XL's memory length). The remat
// planner keeps its plans, and the guards their shape assumptions, under it.
std::string inputsBucketKey(const std::vector<c10::IValue>& inputs);

// How many elements a bucket's tensor inputs hold at most, times the loop's trips when the key
// has them: the size the cost model's trend rule compares buckets by (Note [Binding cost model]).
// nullopt for a key without shapes.
std::optional<double> bucketVolume(const std::string& bucket);

// What a site's bucket ends with where the site evaluates (a batch norm's `training` false): Note
// [Evaluation buckets] in binder.cpp. "float32 [16,64,<=32,<=32] eval".
inline constexpr const char* kEvaluationBucket = " eval";
bool isEvaluationBucket(const std::string& bucket);

// bucketKey for a site whose gradient can flow through values other than the inputs in its key
// (the parameters a model's images meet, the rows a loop writes): " nograd" only when grad mode
// is off.
std::string gradBucketKey(const torch::jit::Stack& inputs, size_t count, int64_t trips);

}  // namespace symtune::binding
