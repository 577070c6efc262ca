#include "symtune/binding/shape_bucket.h"

#include <cctype>
#include <limits>
#include <string>

#include <ATen/ATen.h>

#include "symtune/graph/symugen.h"

namespace symtune::binding {

int64_t bucketDim(int64_t size) {
  if (size <= 2)
    return size;
  int64_t bucket = 4;
  while (bucket < size) {
    if (bucket > std::numeric_limits<int64_t>::max() / 2)
      return size;
    bucket *= 2;
  }
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

std::string inputsBucketKey(const std::vector<c10::IValue>& inputs) {
  const torch::jit::Stack stack(inputs.begin(), inputs.end());
  std::string key = bucketKey(stack, stack.size(), -1);
  for (const auto& in : inputs) {
    if (!in.isInt())
      continue;
    const int64_t bound = bucketDim(in.toInt());
    key += (bound != in.toInt() || bound > 2 ? " <=" : " ") + std::to_string(bound);
  }
  return key;
}

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
  if (trips == std::numeric_limits<int64_t>::max()) {
    key += " x?";  // a while loop: its trips are known when it ends
  } else if (trips >= 0) {
    key += " x";
    appendDim(key, trips);
  }
  if (!grad || !at::GradMode::is_enabled())
    key += " nograd";
  return key;
}

std::optional<double> bucketVolume(const std::string& bucket) {
  // "float32 [<=32,<=1024] [3] x<=16 nograd": each [...] a tensor's bucketed shape.
  double volume = 0;
  bool any = false;
  size_t at = 0;
  const auto number = [&bucket](size_t& i) -> std::optional<double> {
    if (bucket.compare(i, 2, "<=") == 0)
      i += 2;
    const size_t start = i;
    while (i < bucket.size() && std::isdigit(static_cast<unsigned char>(bucket[i])))
      ++i;
    if (i == start)
      return std::nullopt;
    return std::stod(bucket.substr(start, i - start));
  };
  while ((at = bucket.find('[', at)) != std::string::npos) {
    size_t i = at + 1;
    double elements = 1;
    bool shape = true;
    while (i < bucket.size() && bucket[i] != ']') {
      const auto n = number(i);
      if (!n) {
        shape = false;  // "[undefined]"
        break;
      }
      elements *= *n;
      if (i < bucket.size() && bucket[i] == ',')
        ++i;
    }
    if (shape) {
      volume += elements;
      any = true;
    }
    at = i;
  }
  if (!any)
    return std::nullopt;
  const size_t trips = bucket.find(" x");
  if (trips != std::string::npos) {
    size_t i = trips + 2;
    if (const auto n = number(i))
      volume *= *n;
  }
  return volume;
}

bool isEvaluationBucket(const std::string& bucket) {
  const std::string suffix = kEvaluationBucket;
  return bucket.size() >= suffix.size() &&
         bucket.compare(bucket.size() - suffix.size(), suffix.size(), suffix) == 0;
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
