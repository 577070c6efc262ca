#pragma once
// Deterministic synthetic training data. Batch `i` of a source depends only on its seed and `i`, so
// two runs (or two benchmark modes) see the same data.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include <torch/script.h>

#include "symtune/core/session.h"

namespace symtune {

struct Batch {
  std::vector<torch::jit::IValue> inputs;  // the model's forward arguments (tensors, ints, int[])
  // What the loss compares the output with (symtune/runtime/loss.h): class indices, int64 —
  // [batch], or one per position ([batch, positions], or flattened, [batch * positions]), the
  // loss's ignore index where a position is padding — or float values shaped as the output.
  torch::Tensor target;
  int64_t size = 0;  // samples in the batch

  // The sequence_length feature (docs/features.md): dimension 1 of the first input when it is a
  // tensor of rank 2 or 3 (tokens, or [batch, time, features]); 0 otherwise (images).
  int64_t sequenceLength() const {
    if (inputs.empty() || !inputs.front().isTensor())
      return 0;
    const torch::Tensor& first = inputs.front().toTensor();
    return first.dim() == 2 || first.dim() == 3 ? first.size(1) : 0;
  }
};

// A batch that cannot be split into micro-batches (fewer samples than parts, an input not laid out
// by sample). what() is one line.
class SplitError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch batch(int64_t index) = 0;  // on the CPU
  virtual int64_t batchSize() const = 0;
  // `batch` as `parts` micro-batches of consecutive samples, their sizes differing by at most one,
  // whose losses and gradients add up to the batch's (Note [Micro-batches] in trainer.h). The
  // default splits every tensor input and the target along the samples (splitBySample); a source
  // whose inputs are laid out otherwise (trees flattened into node lists) splits its own. Throws
  // SplitError.
  virtual std::vector<Batch> split(const Batch& batch, int64_t parts) const;
};

// Splits a batch whose tensor inputs all have the samples as their first dimension and whose
// target holds the same number of entries per sample (one class, or one per position); ints and
// lists are passed to every micro-batch as they are. Throws SplitError.
std::vector<Batch> splitBySample(const Batch& batch, int64_t parts);

// Image classification whose task is learnable: class c's images are a fixed random template plus
// Gaussian noise. With a noise range each sample's noise scale is drawn uniformly from it, so some
// samples are easy and some hard (what an early-exit network needs).
//   ClassTemplateImages data(/*classes=*/10, /*shape=*/{3, 32, 32}, /*batch=*/16, /*seed=*/0);
class ClassTemplateImages final : public DataSource {
 public:
  ClassTemplateImages(int64_t classes, std::vector<int64_t> sampleShape, int64_t batchSize,
                      uint64_t seed, std::pair<double, double> noise = {1.0, 1.0});
  Batch batch(int64_t index) override;
  int64_t batchSize() const override { return batchSize_; }

 private:
  int64_t classes_, batchSize_;
  std::vector<int64_t> sampleShape_;
  uint64_t seed_;
  std::pair<double, double> noise_;
  torch::Tensor templates_;  // [classes, sampleShape...]
};

// Data for a user's model described by input specs: Gaussian float inputs (int64 inputs uniform in
// [0, 100)), labelled by a fixed random linear projection of the first input, so a model that can
// represent a linear classifier learns it.
class ProjectionLabelled final : public DataSource {
 public:
  ProjectionLabelled(std::vector<InputSpec> inputs, int64_t classes, int64_t batchSize,
                     uint64_t seed);
  Batch batch(int64_t index) override;
  int64_t batchSize() const override { return batchSize_; }

 private:
  std::vector<InputSpec> inputs_;
  int64_t classes_, batchSize_;
  uint64_t seed_;
  torch::Tensor projection_;  // [features of input 0, classes]
};

// Moves a batch's tensor inputs to `device`; sizes and lists (segment lengths, tree levels) stay
// on the host.
void inputsTo(std::vector<torch::jit::IValue>& inputs, const torch::Device& device,
              bool nonBlocking);

// A CPU generator for batch `index` of a source seeded with `seed` (stable across runs).
at::Generator batchGenerator(uint64_t seed, int64_t index);

}  // namespace symtune
