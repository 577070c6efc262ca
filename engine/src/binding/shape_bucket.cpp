#include "symtune/binding/shape_bucket.h"

#include <ATen/ATen.h>

#include "symtune/graph/symugen.h"

namespace symtune::binding {

int64_t bucketDim(int64_t size) {
  if (size <= 2)
    return size;
  int64_t bucket = 4;
  while (bucket < size)
    bucket *= 2;
  return bucket;
}

namespace {

void appendDim(std::string& key, int64_t size) {
  const int64_t b = bucketDim(size);
  if (b != size || size > 2)
    key += "<=";
  key += std::to_string(b);
}

}  // namespace

std::string bucketKey(const torch::jit::Stack& stack, size_t count, int64_t trips) {
  std::string key;
  std::string shapes;
  bool grad = false;
  for (size_t i = stack.size() - count; i < stack.size(); ++i) {
    if (!stack[i].isTensor())
      continue;
    const at::Tensor& t = stack[i].toTensor();
    if (!t.defined()) {
      shapes += shapes.empty() ? "[undefined]" : " [undefined]";
      continue;
    }
    if (key.empty()) {
      key = dtypeName(t.scalar_type());
      if (!t.device().is_cpu())
        key += " " + t.device().str();
    }
    grad = grad || t.requires_grad();
    shapes += shapes.empty() ? "[" : " [";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d > 0)
        shapes += ",";
      appendDim(shapes, t.size(d));
    }
    shapes += "]";
  }
  key += key.empty() ? shapes : " " + shapes;
  if (trips >= 0) {
    key += " x";
    appendDim(key, trips);
  }
  if (!grad || !at::GradMode::is_enabled())
    key += " nograd";
  return key;
}

std::string gradBucketKey(const torch::jit::Stack& inputs, size_t count, int64_t trips) {
  std::string key = bucketKey(inputs, count, trips);
  const std::string nograd = " nograd";
  if (at::GradMode::is_enabled() && key.size() > nograd.size() &&
      key.compare(key.size() - nograd.size(), nograd.size(), nograd) == 0)
    key.resize(key.size() - nograd.size());
  return key;
}

}  // namespace symtune::binding
