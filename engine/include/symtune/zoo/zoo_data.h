#pragma once
// The synthetic data of the zoo's sequence, routing and tree models (data_source.h has the image
// data). Every source is deterministic in (seed, batch index) and its task is learnable; each
// batch's sizes vary in the way its model's control flow depends on.

#include <cstdint>
#include <utility>

#include "symtune/data/data_source.h"

namespace symtune {

// An inclusive range of sizes drawn uniformly per batch.
using SizeRange = std::pair<int64_t, int64_t>;

// Language modelling: token streams from a fixed random Markov chain (each token has a few likely
// successors), cut into `segments` segments whose length is drawn per batch, with a memory length
// drawn per batch too. Inputs: tokens [batch, segments * segLen], segLen (int), memLen (int);
// target: the next token of every position, flattened.
class MarkovText final : public DataSource {
 public:
  MarkovText(int64_t vocab, int64_t batchSize, int64_t segments, SizeRange segLen, SizeRange memLen,
             uint64_t seed);
  Batch batch(int64_t index) override;
  int64_t batchSize() const override { return batchSize_; }

 private:
  int64_t vocab_, batchSize_, segments_;
  SizeRange segLen_, memLen_;
  uint64_t seed_;
  torch::Tensor transitions_;  // [vocab, vocab] row-stochastic
};

// Tagging: sentences of lengths drawn per sentence, padded with token 0 to the batch's longest.
// A token's tag is its word class, except for ambiguous words, whose tag is the previous word's
// class (so the tagger needs context). Inputs: tokens [batch, maxLen], lengths [batch] (int64);
// target: tags [batch * maxLen], -100 on padding.
class TaggedSentences final : public DataSource {
 public:
  TaggedSentences(int64_t vocab, int64_t tags, int64_t batchSize, SizeRange length, uint64_t seed);
  Batch batch(int64_t index) override;
  int64_t batchSize() const override { return batchSize_; }
  // By sample, each micro-batch padded to its own longest sentence.
  std::vector<Batch> split(const Batch& batch, int64_t parts) const override;

 private:
  int64_t vocab_, tags_, batchSize_;
  SizeRange length_;
  uint64_t seed_;
  torch::Tensor wordClass_;  // [vocab] int64
  torch::Tensor ambiguous_;  // [vocab] bool
};

// Token classification over clustered inputs: each token lies near one of `clusters` centres, and
// its class is the argmax of a projection that differs per cluster — a piecewise-linear task that
// experts can split between them. Inputs: x [batch, tokens, dim]; target [batch * tokens].
class ClusteredTokens final : public DataSource {
 public:
  ClusteredTokens(int64_t dim, int64_t clusters, int64_t classes, int64_t batchSize, int64_t tokens,
                  uint64_t seed);
  Batch batch(int64_t index) override;
  int64_t batchSize() const override { return batchSize_; }

 private:
  int64_t dim_, clusters_, classes_, batchSize_, tokens_;
  uint64_t seed_;
  torch::Tensor centres_;      // [clusters, dim]
  torch::Tensor projections_;  // [clusters, dim, classes]
};

// Random binary trees over digit leaves; an inner node's value is (left + right) mod `classes`,
// and a tree's label is its root's value. The trees of a batch are laid out as one node array:
// leaves first within each tree, children before parents. Inputs: tokens [nodes] (leaf digit + 1,
// 0 for inner nodes), left [nodes], right [nodes] (children of inner nodes, 0 for leaves), order
// [inner nodes] (inner nodes by height, lowest first), levels (int[]: inner nodes per height),
// roots [batch]; target [batch].
class RandomTrees final : public DataSource {
 public:
  RandomTrees(int64_t classes, int64_t batchSize, SizeRange leaves, uint64_t seed);
  Batch batch(int64_t index) override;
  int64_t batchSize() const override { return batchSize_; }
  // Consecutive trees, their nodes numbered from 0 again, laid out as batch() lays them out.
  std::vector<Batch> split(const Batch& batch, int64_t parts) const override;

 private:
  int64_t classes_, batchSize_;
  SizeRange leaves_;
  uint64_t seed_;
};

}  // namespace symtune
