#include "symtune/data/data_source.h"

#include <ATen/CPUGeneratorImpl.h>

#include <sstream>

namespace symtune {

std::vector<Batch> DataSource::split(const Batch& batch, int64_t parts) const {
  return splitBySample(batch, parts);
}

std::vector<Batch> splitBySample(const Batch& batch, int64_t parts) {
  if (parts < 1)
    throw SplitError("a batch splits into at least one part, not " + std::to_string(parts));
  if (batch.size < parts)
    throw SplitError("a batch of " + std::to_string(batch.size) + " samples cannot be split into " +
                     std::to_string(parts) + " micro-batches");
  for (size_t i = 0; i < batch.inputs.size(); ++i) {
    const auto& in = batch.inputs[i];
    if (!in.isTensor())
      continue;
    const torch::Tensor& t = in.toTensor();
    if (t.dim() == 0 || t.size(0) != batch.size) {
      std::ostringstream shape;
      shape << t.sizes();
      throw SplitError("input " + std::to_string(i) + " of shape " + shape.str() +
                       " is not laid out by sample (its first dimension is not the batch's " +
                       std::to_string(batch.size) + ")");
    }
  }
  if (batch.target.numel() % batch.size != 0)
    throw SplitError("the target's " + std::to_string(batch.target.numel()) +
                     " entries are not the same number per sample for " +
                     std::to_string(batch.size) + " samples");
  // A target laid out by sample ([batch, ...]) keeps its shape; one flattened over the positions
  // ([batch * positions]) is cut into whole samples and stays flat.
  const bool bySample = batch.target.dim() >= 1 && batch.target.size(0) == batch.size;
  const torch::Tensor target = bySample ? batch.target : batch.target.reshape({batch.size, -1});
  std::vector<Batch> micro;
  int64_t start = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t size = batch.size / parts + (p < batch.size % parts ? 1 : 0);
    Batch m;
    for (const auto& in : batch.inputs)
      m.inputs.push_back(in.isTensor() ? c10::IValue(in.toTensor().narrow(0, start, size)) : in);
    m.target =
        bySample ? target.narrow(0, start, size) : target.narrow(0, start, size).reshape({-1});
    m.size = size;
    micro.push_back(std::move(m));
    start += size;
  }
  return micro;
}

void inputsTo(std::vector<torch::jit::IValue>& inputs, const torch::Device& device,
              bool nonBlocking) {
  for (auto& in : inputs) {
    if (in.isTensor())
      in = in.toTensor().to(device, nonBlocking);
  }
}

at::Generator batchGenerator(uint64_t seed, int64_t index) {
  // SplitMix64 of (seed, index): neighbouring indices get unrelated streams.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return at::make_generator<at::CPUGeneratorImpl>(z ^ (z >> 31));
}

ClassTemplateImages::ClassTemplateImages(int64_t classes, std::vector<int64_t> sampleShape,
                                         int64_t batchSize, uint64_t seed,
                                         std::pair<double, double> noise)
    : classes_(classes),
      batchSize_(batchSize),
      sampleShape_(std::move(sampleShape)),
      seed_(seed),
      noise_(noise) {
  TORCH_CHECK(
      classes_ >= 2 && batchSize_ > 0,
      "ClassTemplateImages needs at least 2 classes and a positive batch size; got classes ",
      classes_, ", batch size ", batchSize_);
  TORCH_CHECK(noise_.first > 0 && noise_.second >= noise_.first,
              "ClassTemplateImages needs a noise range [lo, hi] with 0 < lo <= hi; got [",
              noise_.first, ", ", noise_.second, "]");
  std::vector<int64_t> shape{classes_};
  shape.insert(shape.end(), sampleShape_.begin(), sampleShape_.end());
  templates_ = torch::randn(shape, batchGenerator(seed_, -1));
}

Batch ClassTemplateImages::batch(int64_t index) {
  auto gen = batchGenerator(seed_, index);
  auto labels = torch::randint(classes_, {batchSize_}, gen, torch::kLong);
  std::vector<int64_t> shape{batchSize_};
  shape.insert(shape.end(), sampleShape_.begin(), sampleShape_.end());
  auto noise = torch::randn(shape, gen);
  if (noise_.second > noise_.first) {
    std::vector<int64_t> perSample(shape.size(), 1);
    perSample[0] = batchSize_;
    noise.mul_(torch::rand(perSample, gen) * (noise_.second - noise_.first) + noise_.first);
  } else if (noise_.first != 1.0) {
    noise.mul_(noise_.first);
  }
  auto x = templates_.index_select(0, labels) + noise;
  return Batch{{x}, labels, batchSize_};
}

namespace {

torch::Tensor randomInput(const InputSpec& spec, int64_t batchSize, at::Generator& gen) {
  std::vector<int64_t> shape = spec.shape;
  shape[0] = batchSize;
  switch (spec.dtype) {
    case DType::Int64:
      return torch::randint(100, shape, gen, torch::kLong);
    case DType::Float64:
      return torch::randn(shape, gen, torch::kDouble);
    case DType::Float32:
      break;
  }
  return torch::randn(shape, gen, torch::kFloat);
}

}  // namespace

ProjectionLabelled::ProjectionLabelled(std::vector<InputSpec> inputs, int64_t classes,
                                       int64_t batchSize, uint64_t seed)
    : inputs_(std::move(inputs)), classes_(classes), batchSize_(batchSize), seed_(seed) {
  TORCH_CHECK(!inputs_.empty() && classes_ >= 2 && batchSize_ > 0,
              "ProjectionLabelled needs at least one input, at least 2 classes and a positive "
              "batch size; got ",
              inputs_.size(), " inputs, classes ", classes_, ", batch size ", batchSize_);
  int64_t features = 1;
  for (size_t d = 1; d < inputs_[0].shape.size(); ++d) {
    features *= inputs_[0].shape[d];
  }
  projection_ = torch::randn({features, classes_}, batchGenerator(seed_, -1), torch::kDouble);
}

Batch ProjectionLabelled::batch(int64_t index) {
  auto gen = batchGenerator(seed_, index);
  Batch b;
  b.size = batchSize_;
  for (const auto& spec : inputs_) {
    b.inputs.emplace_back(randomInput(spec, batchSize_, gen));
  }
  const auto first = b.inputs.front().toTensor().reshape({batchSize_, -1}).to(torch::kDouble);
  b.target = first.mm(projection_).argmax(1);
  return b;
}

}  // namespace symtune
