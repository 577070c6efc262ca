#include "symtune/zoo/zoo_data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <random>

namespace symtune {

namespace {

int64_t drawSize(const SizeRange& range, at::Generator& gen) {
  if (range.second <= range.first)
    return range.first;
  return torch::randint(range.first, range.second + 1, {1}, gen, torch::kLong).item<int64_t>();
}

void checkRange(const SizeRange& range, int64_t least, const char* what) {
  TORCH_CHECK(range.first >= least && range.second >= range.first, what,
              " must be a range [lo, hi] ", "with ", least, " <= lo <= hi; got [", range.first,
              ", ", range.second, "]");
}

}  // namespace

MarkovText::MarkovText(int64_t vocab, int64_t batchSize, int64_t segments, SizeRange segLen,
                       SizeRange memLen, uint64_t seed)
    : vocab_(vocab),
      batchSize_(batchSize),
      segments_(segments),
      segLen_(segLen),
      memLen_(memLen),
      seed_(seed) {
  TORCH_CHECK(vocab_ >= 4 && batchSize_ > 0 && segments_ > 0,
              "MarkovText needs a vocabulary of at least 4 tokens, a positive batch size and at "
              "least one segment; got vocabulary ",
              vocab_, ", batch size ", batchSize_, ", segments ", segments_);
  checkRange(segLen_, 1, "MarkovText segment length");
  checkRange(memLen_, 0, "MarkovText memory length");
  // Three likely successors per token, with skewed probabilities: the chain's entropy is well
  // below log(vocab), so a model that learns the successors sees its loss fall.
  auto gen = batchGenerator(seed_, -1);
  constexpr int64_t kSuccessors = 3;
  auto next = torch::randint(vocab_, {vocab_, kSuccessors}, gen, torch::kLong);
  auto weight = torch::softmax(torch::randn({vocab_, kSuccessors}, gen) * 1.5, 1);
  transitions_ = torch::zeros({vocab_, vocab_}).scatter_add_(1, next, weight);
}

Batch MarkovText::batch(int64_t index) {
  auto gen = batchGenerator(seed_, index);
  const int64_t segLen = drawSize(segLen_, gen);
  const int64_t memLen = drawSize(memLen_, gen);
  const int64_t length = segments_ * segLen;
  auto tokens = torch::empty({batchSize_, length + 1}, torch::kLong);
  auto current = torch::randint(vocab_, {batchSize_}, gen, torch::kLong);
  tokens.select(1, 0).copy_(current);
  for (int64_t t = 1; t <= length; ++t) {
    current = torch::multinomial(transitions_.index_select(0, current), 1, true, gen).squeeze(1);
    tokens.select(1, t).copy_(current);
  }
  Batch b;
  b.inputs = {tokens.narrow(1, 0, length).contiguous(), c10::IValue(segLen), c10::IValue(memLen)};
  b.target = tokens.narrow(1, 1, length).reshape({-1});
  b.size = batchSize_;
  return b;
}

TaggedSentences::TaggedSentences(int64_t vocab, int64_t tags, int64_t batchSize, SizeRange length,
                                 uint64_t seed)
    : vocab_(vocab), tags_(tags), batchSize_(batchSize), length_(length), seed_(seed) {
  TORCH_CHECK(vocab_ >= 4 && tags_ >= 2 && batchSize_ > 0,
              "TaggedSentences needs a vocabulary of at least 4 words, at least 2 tags and a "
              "positive batch size; got vocabulary ",
              vocab_, ", tags ", tags_, ", batch size ", batchSize_);
  checkRange(length_, 1, "TaggedSentences length");
  auto gen = batchGenerator(seed_, -1);
  wordClass_ = torch::randint(tags_, {vocab_}, gen, torch::kLong);
  ambiguous_ = torch::rand({vocab_}, gen) < 0.2;
  ambiguous_[0] = false;  // padding
}

Batch TaggedSentences::batch(int64_t index) {
  auto gen = batchGenerator(seed_, index);
  auto lengths = torch::randint(length_.first, length_.second + 1, {batchSize_}, gen, torch::kLong);
  const int64_t maxLen = lengths.max().item<int64_t>();
  auto tokens = torch::randint(1, vocab_, {batchSize_, maxLen}, gen, torch::kLong);
  const auto padding = torch::arange(maxLen, torch::kLong).unsqueeze(0) >= lengths.unsqueeze(1);
  tokens.masked_fill_(padding, 0);
  const auto previous =
      torch::cat({torch::zeros({batchSize_, 1}, torch::kLong), tokens.narrow(1, 0, maxLen - 1)}, 1);
  auto tags = torch::where(ambiguous_.index({tokens}), wordClass_.index({previous}),
                           wordClass_.index({tokens}));
  tags.masked_fill_(padding, -100);
  Batch b;
  b.inputs = {tokens, lengths};
  b.target = tags.reshape({-1});
  b.size = batchSize_;
  return b;
}

std::vector<Batch> TaggedSentences::split(const Batch& batch, int64_t parts) const {
  std::vector<Batch> micro = splitBySample(batch, parts);
  for (Batch& m : micro) {
    const torch::Tensor tokens = m.inputs[0].toTensor();
    const int64_t longest = m.inputs[1].toTensor().max().item<int64_t>();
    m.inputs[0] = tokens.narrow(1, 0, longest);
    m.target = m.target.view({m.size, tokens.size(1)}).narrow(1, 0, longest).reshape({-1});
  }
  return micro;
}

ClusteredTokens::ClusteredTokens(int64_t dim, int64_t clusters, int64_t classes, int64_t batchSize,
                                 int64_t tokens, uint64_t seed)
    : dim_(dim),
      clusters_(clusters),
      classes_(classes),
      batchSize_(batchSize),
      tokens_(tokens),
      seed_(seed) {
  TORCH_CHECK(dim_ > 0 && clusters_ > 0 && classes_ >= 2 && batchSize_ > 0 && tokens_ > 0,
              "ClusteredTokens needs positive dimensions, clusters, batch size and tokens, and at "
              "least 2 classes; got dimensions ",
              dim_, ", clusters ", clusters_, ", classes ", classes_, ", batch size ", batchSize_,
              ", tokens ", tokens_);
  auto gen = batchGenerator(seed_, -1);
  centres_ = torch::randn({clusters_, dim_}, gen) * 2;
  projections_ = torch::randn({clusters_, dim_, classes_}, gen);
}

Batch ClusteredTokens::batch(int64_t index) {
  auto gen = batchGenerator(seed_, index);
  const int64_t n = batchSize_ * tokens_;
  auto cluster = torch::randint(clusters_, {n}, gen, torch::kLong);
  auto x = centres_.index_select(0, cluster) + torch::randn({n, dim_}, gen) * 0.5;
  // Every cluster's projection at once, then each token's own: [n, clusters, classes].
  auto scores =
      x.mm(projections_.permute({1, 0, 2}).reshape({dim_, -1})).view({n, clusters_, classes_});
  auto labels =
      scores.gather(1, cluster.view({n, 1, 1}).expand({n, 1, classes_})).squeeze(1).argmax(1);
  Batch b;
  b.inputs = {x.view({batchSize_, tokens_, dim_})};
  b.target = labels;
  b.size = batchSize_;
  return b;
}

RandomTrees::RandomTrees(int64_t classes, int64_t batchSize, SizeRange leaves, uint64_t seed)
    : classes_(classes), batchSize_(batchSize), leaves_(leaves), seed_(seed) {
  TORCH_CHECK(classes_ >= 2 && classes_ <= 10 && batchSize_ > 0,
              "RandomTrees needs 2 to 10 classes and a positive batch size; got classes ", classes_,
              ", batch size ", batchSize_);
  checkRange(leaves_, 2, "RandomTrees leaves");
}

namespace {

struct TreeBuilder {
  std::mt19937_64& rng;
  int64_t classes;
  std::vector<int64_t> token, left, right, height, value;

  // Builds a tree over `leaves` leaves and returns its root's index.
  int64_t build(int64_t leaves) {
    if (leaves == 1) {
      const auto digit = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
      return add(digit + 1, 0, 0, 0, digit);
    }
    const auto split = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(leaves - 1));
    const int64_t l = build(split);
    const int64_t r = build(leaves - split);
    return add(0, l, r, 1 + std::max(height[l], height[r]), (value[l] + value[r]) % classes);
  }

  int64_t add(int64_t tok, int64_t l, int64_t r, int64_t h, int64_t v) {
    token.push_back(tok);
    left.push_back(l);
    right.push_back(r);
    height.push_back(h);
    value.push_back(v);
    return static_cast<int64_t>(token.size()) - 1;
  }
};

torch::Tensor longTensor(const std::vector<int64_t>& v) {
  return torch::tensor(v, torch::kLong);
}

}  // namespace

Batch RandomTrees::batch(int64_t index) {
  auto gen = batchGenerator(seed_, index);
  std::mt19937_64 rng(at::check_generator<at::CPUGeneratorImpl>(gen)->random64());
  TreeBuilder trees{rng, classes_, {}, {}, {}, {}, {}};
  std::vector<int64_t> roots, labels;
  std::uniform_int_distribution<int64_t> leafCount(leaves_.first, leaves_.second);
  for (int64_t i = 0; i < batchSize_; ++i) {
    const int64_t root = trees.build(leafCount(rng));
    roots.push_back(root);
    labels.push_back(trees.value[root]);
  }
  // Inner nodes by height: every node of a level depends only on lower levels.
  std::vector<int64_t> order;
  for (size_t n = 0; n < trees.height.size(); ++n) {
    if (trees.height[n] > 0)
      order.push_back(static_cast<int64_t>(n));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return trees.height[a] < trees.height[b]; });
  std::vector<int64_t> levels;
  for (int64_t n : order) {
    const auto h = static_cast<size_t>(trees.height[n]);
    if (levels.size() < h)
      levels.resize(h, 0);
    ++levels[h - 1];
  }
  Batch b;
  b.inputs = {longTensor(trees.token),
              longTensor(trees.left),
              longTensor(trees.right),
              longTensor(order),
              c10::IValue(c10::List<int64_t>(levels)),
              longTensor(roots)};
  b.target = longTensor(labels);
  b.size = batchSize_;
  return b;
}

std::vector<Batch> RandomTrees::split(const Batch& batch, int64_t parts) const {
  if (parts < 1 || batch.size < parts)
    return splitBySample(batch, parts);  // refused with its message
  TORCH_CHECK(batch.inputs.size() == 6, "RandomTrees::split: not a batch of trees");
  const auto vec = [](const c10::IValue& v) {
    const torch::Tensor t = v.toTensor().contiguous();
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  };
  const std::vector<int64_t> token = vec(batch.inputs[0]), left = vec(batch.inputs[1]),
                             right = vec(batch.inputs[2]), order = vec(batch.inputs[3]),
                             roots = vec(batch.inputs[5]), labels = vec(batch.target);
  const std::vector<int64_t> levels = batch.inputs[4].toIntVector();
  std::vector<Batch> micro;
  int64_t first = 0;  // the part's first tree
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t trees = batch.size / parts + (p < batch.size % parts ? 1 : 0);
    // A tree's nodes are consecutive, ending at its root.
    const int64_t lo = first == 0 ? 0 : roots[first - 1] + 1, hi = roots[first + trees - 1];
    std::vector<int64_t> t, l, r, o, lv, ro, y;
    for (int64_t n = lo; n <= hi; ++n) {
      const bool inner = token[n] == 0;
      t.push_back(token[n]);
      l.push_back(inner ? left[n] - lo : 0);
      r.push_back(inner ? right[n] - lo : 0);
    }
    size_t start = 0;
    for (int64_t count : levels) {  // the part's inner nodes of each height, in the batch's order
      int64_t kept = 0;
      for (size_t i = start; i < start + static_cast<size_t>(count); ++i) {
        if (order[i] >= lo && order[i] <= hi) {
          o.push_back(order[i] - lo);
          ++kept;
        }
      }
      start += static_cast<size_t>(count);
      if (kept > 0)  // heights are consecutive: the part's tallest tree ends its levels
        lv.push_back(kept);
    }
    for (int64_t i = first; i < first + trees; ++i) {
      ro.push_back(roots[i] - lo);
      y.push_back(labels[i]);
    }
    Batch m;
    m.inputs = {longTensor(t),
                longTensor(l),
                longTensor(r),
                longTensor(o),
                c10::IValue(c10::List<int64_t>(lv)),
                longTensor(ro)};
    m.target = longTensor(y);
    m.size = trees;
    micro.push_back(std::move(m));
    first += trees;
  }
  return micro;
}

}  // namespace symtune
