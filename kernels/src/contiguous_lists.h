#pragma once
// Contiguous working copies of the tensors a multi-tensor kernel reads and writes: a tensor that
// is contiguous is used as it is; one that is not is copied, and written back by writeBack() when
// the kernel changed it. And the chunks a CPU multi-tensor kernel's parallel loop runs over.
// Private to kernels/.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel.h"

namespace symtune::kernels {

class ContiguousList {
 public:
  void add(const at::Tensor& t, bool written) {
    if (t.is_contiguous()) {
      tensors_.push_back(t);
      return;
    }
    at::Tensor copy = t.contiguous();
    tensors_.push_back(copy);
    if (written)
      pending_.emplace_back(t, copy);
  }
  const at::Tensor& operator[](size_t i) const { return tensors_[i]; }
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  void writeBack() {
    for (auto& [original, copy] : pending_)
      original.copy_(copy);
    pending_.clear();
  }

 private:
  std::vector<at::Tensor> tensors_;
  std::vector<std::pair<at::Tensor, at::Tensor>> pending_;  // (original, contiguous copy)
};

// A range of one tensor's elements: all chunks of all tensors share one parallel loop.
struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

inline std::vector<Chunk> chunksOf(const std::vector<at::Tensor>& tensors, int64_t grain) {
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int64_t n = tensors[t].numel();
    for (int64_t b = 0; b < n; b += grain)
      chunks.push_back({t, b, std::min(n, b + grain)});
  }
  return chunks;
}

// Runs f(k, chunk) for every chunk k, in parallel, a chunk at a time.
template <typename F>
void parallelOverChunks(const std::vector<Chunk>& chunks, const F& f) {
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      f(static_cast<size_t>(k), chunks[static_cast<size_t>(k)]);
  });
}

// Runs f(tensor, begin, end) over every element of every tensor, in parallel, the work split by
// elements rather than by tensors: a model's hundreds of small tensors and few large ones load
// the threads evenly. Each call covers one chunk (`grain` elements from a multiple of `grain` in
// one tensor), so where a kernel's vector loop ends and its scalar tail begins does not depend on
// the number of threads: results are the same bits on 1 thread or 16.
template <typename F>
void parallelOverElements(const std::vector<at::Tensor>& tensors, int64_t grain, const F& f) {
  parallelOverChunks(chunksOf(tensors, grain),
                     [&](size_t, const Chunk& c) { f(c.tensor, c.begin, c.end); });
}

}  // namespace symtune::kernels
