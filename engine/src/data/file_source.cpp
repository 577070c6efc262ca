#include "symtune/data/file_source.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include <ATen/record_function.h>
#include <torch/data.h>

#include "symtune/data/image_folder.h"

namespace symtune {

namespace {

// What the files hold, ready to batch: every array with the samples along dimension 0.
struct Arrays {
  std::vector<torch::Tensor> inputs;
  torch::Tensor target;
  torch::Tensor lengths;  // [samples] int64; undefined without sequences
  int64_t padded = 0;     // with lengths: the sequences' dimension 1 in the files
  int64_t ignoreIndex = -100;
};

// The samples `rows` of `a` as one batch; with lengths, cut to the batch's longest sequence,
// the target's positions past each sample's length set to the ignore index.
Batch gather(const Arrays& a, const torch::Tensor& rows) {
  Batch b;
  b.size = rows.size(0);
  torch::Tensor lengths;
  int64_t longest = 0;
  if (a.lengths.defined()) {
    lengths = a.lengths.index_select(0, rows);
    longest = lengths.max().item<int64_t>();
  }
  const auto sequence = [&](const torch::Tensor& t) {
    return longest > 0 && t.dim() >= 2 && t.size(1) == a.padded;
  };
  for (const auto& input : a.inputs) {
    torch::Tensor t = input.index_select(0, rows);
    b.inputs.emplace_back(sequence(t) ? t.narrow(1, 0, longest).contiguous() : t);
  }
  torch::Tensor target = a.target.index_select(0, rows);
  if (sequence(target)) {
    target = target.narrow(1, 0, longest).clone();
    torch::Tensor past = torch::arange(longest).unsqueeze(0).ge(lengths.unsqueeze(1));
    while (past.dim() < target.dim())
      past = past.unsqueeze(-1);
    target.masked_fill_(past.expand_as(target), a.ignoreIndex);
  }
  b.target = target;
  return b;
}

// A stream of its own for the data's orders, apart from the synthetic sources' batches.
at::Generator orderGenerator(uint64_t seed, int64_t epoch) {
  return batchGenerator(seed ^ 0x5eed0f0da7aULL, epoch);
}

// torch::data's sampler for the training samples: epoch e's order is a permutation drawn from
// (seed, e), or the files' order without shuffling. It may start mid-epoch (a batch asked for
// out of order, a resumed run); each later reset begins the next epoch.
class EpochOrder final : public torch::data::samplers::Sampler<> {
 public:
  // `lengths` (of the training rows, in their order), when given, buckets each epoch's order by
  // length in pools of kBucketPool batches of `batchSize` (bucketed()).
  EpochOrder(int64_t size, uint64_t seed, bool shuffle, int64_t epoch, int64_t position,
             torch::Tensor lengths = {}, int64_t batchSize = 1)
      : size_(size),
        seed_(seed),
        shuffle_(shuffle),
        epoch_(epoch),
        position_(position),
        lengths_(std::move(lengths)),
        batchSize_(batchSize) {}

  void reset(std::optional<size_t> newSize = std::nullopt) override {
    if (newSize)
      size_ = static_cast<int64_t>(*newSize);
    if (positioned_) {
      positioned_ = false;
    } else {
      ++epoch_;
      position_ = 0;
    }
    order_ = shuffle_ ? torch::randperm(size_, orderGenerator(seed_, epoch_), torch::kLong)
                      : torch::arange(size_, torch::kLong);
    if (lengths_.defined())
      order_ = bucketed(order_);
  }

  std::optional<std::vector<size_t>> next(size_t batchSize) override {
    if (position_ >= size_)
      return std::nullopt;
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(batchSize), size_ - position_);
    const int64_t* at = order_.data_ptr<int64_t>() + position_;
    position_ += n;
    return std::vector<size_t>(at, at + n);
  }

  // Pools of kBucketPool batches of the shuffled order's whole batches, each sorted by length
  // (stably) and cut into batches; the whole batches then shuffled, so each batch holds sequences
  // of like length and the epoch still visits every sample once. The samples past the whole
  // batches are the shuffled order's last, as drawn, and make the short last batch: cut from the
  // sorted order (until 2026-12-07) it held the longest of the last pool, which drop_last then
  // left out of every epoch.
  torch::Tensor bucketed(const torch::Tensor& order) const {
    constexpr int64_t kBucketPool = 20;
    const int64_t whole = size_ / batchSize_;
    const int64_t kept = whole * batchSize_;
    // At most the whole order: kBucketPool times a batch size near int64's largest overflowed.
    const int64_t pool = whole < kBucketPool ? kept : kBucketPool * batchSize_;
    std::vector<torch::Tensor> pools;
    for (int64_t start = 0; start < kept; start += pool) {
      const torch::Tensor rows = order.narrow(0, start, std::min(pool, kept - start));
      const torch::Tensor byLength =
          std::get<1>(lengths_.index_select(0, rows).sort(/*stable=*/true, 0, false));
      pools.push_back(rows.index_select(0, byLength));
    }
    std::vector<torch::Tensor> out;
    if (whole > 0) {
      const torch::Tensor sorted = torch::cat(pools);
      const torch::Tensor batches =
          torch::randperm(whole, orderGenerator(~seed_, epoch_), torch::kLong);
      const int64_t* b = batches.data_ptr<int64_t>();
      for (int64_t i = 0; i < whole; ++i)
        out.push_back(sorted.narrow(0, b[i] * batchSize_, batchSize_));
    }
    if (kept < size_)
      out.push_back(order.narrow(0, kept, size_ - kept));
    return out.empty() ? order : torch::cat(out);
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("epoch", torch::tensor(epoch_), /*is_buffer=*/true);
    archive.write("position", torch::tensor(position_), /*is_buffer=*/true);
  }

  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor epoch, position;
    archive.read("epoch", epoch, /*is_buffer=*/true);
    archive.read("position", position, /*is_buffer=*/true);
    epoch_ = epoch.item<int64_t>();
    position_ = position.item<int64_t>();
    positioned_ = true;
  }

 private:
  int64_t size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_, position_;
  bool positioned_ = true;
  torch::Tensor order_;
  torch::Tensor lengths_;
  int64_t batchSize_;
};

// torch::data's dataset: the training rows of the arrays, a batch gathered at once.
class ArrayDataset final : public torch::data::datasets::BatchDataset<ArrayDataset, Batch> {
 public:
  ArrayDataset(std::shared_ptr<const Arrays> arrays, torch::Tensor rows)
      : arrays_(std::move(arrays)), rows_(std::move(rows)) {}

  Batch get_batch(c10::ArrayRef<size_t> request) override {
    // Not the model's ops: the op tracer observes every thread (a global RecordFunction
    // callback), and a loader worker's gathers landed in the traced steps, appended to the
    // worker's buffer while the training thread took the buffers (a data race).
    at::RecordFunctionGuard untraced(false);
    std::vector<int64_t> picked;
    picked.reserve(request.size());
    const int64_t* rows = rows_.data_ptr<int64_t>();
    for (size_t i : request)
      picked.push_back(rows[i]);
    return gather(*arrays_, torch::tensor(picked, torch::kLong));
  }

  std::optional<size_t> size() const override { return static_cast<size_t>(rows_.size(0)); }

 private:
  std::shared_ptr<const Arrays> arrays_;
  torch::Tensor rows_;
};

using Loader = torch::data::StatelessDataLoader<ArrayDataset, EpochOrder>;

std::string shapeOf(const torch::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 1; d < t.dim(); ++d)
    out += (d > 1 ? ", " : "") + std::to_string(t.size(d));
  return out + "] " + std::string(c10::toString(t.scalar_type()));
}

// Floating arrays arrive as float32, integer and boolean ones as int64.
torch::Tensor asInput(const torch::Tensor& t) {
  return t.to(t.is_floating_point() ? torch::kFloat : torch::kLong).contiguous();
}

}  // namespace

struct FileDataSource::State {
  std::shared_ptr<const Arrays> arrays;
  torch::Tensor train, held;  // rows of the arrays, ascending
  int64_t batchSize = 0, perEpoch = 0;
  uint64_t seed = 0;
  bool shuffle = true, dropLast = false;
  int workers = 0;
  torch::Tensor trainLengths;  // with bucket_by_length: the training rows' lengths
  std::string description;
  // The loader positioned to yield batch `next`; destroyed iterator first.
  std::unique_ptr<Loader> loader;
  std::optional<torch::data::Iterator<Batch>> it;
  bool advance = false;
  int64_t next = -1;

  void position(int64_t index) {
    it.reset();
    loader.reset();
    EpochOrder order(train.size(0), seed, shuffle, index / perEpoch, (index % perEpoch) * batchSize,
                     trainLengths, batchSize);
    loader = std::make_unique<Loader>(ArrayDataset(arrays, train), std::move(order),
                                      torch::data::DataLoaderOptions()
                                          .batch_size(static_cast<size_t>(batchSize))
                                          .workers(static_cast<size_t>(workers))
                                          .enforce_ordering(true)
                                          .drop_last(dropLast));
    it = loader->begin();
    advance = false;
  }
};

FileDataSource::FileDataSource(const DataSpec& data, const LossSpec& loss, int64_t classes,
                               int64_t batchSize)
    : state_(std::make_unique<State>()) {
  const DataFilesSpec& files = data.files;
  if (!files.enabled())
    throw DataError("the session's data block names no data files (data.format)");
  const std::string source =
      files.format == "npy" ? std::filesystem::path(files.target).string() : files.file.string();
  auto arrays = std::make_shared<Arrays>();
  arrays->ignoreIndex = loss.ignoreIndex;
  std::vector<std::string> inputNames;
  std::string targetName = files.target;
  torch::Tensor lengths;

  if (files.format == "csv") {
    const CsvTable table = readCsv(files.file);
    const auto column = [&](const std::string& name) -> int64_t {
      const auto at = std::find(table.columns.begin(), table.columns.end(), name);
      if (at == table.columns.end()) {
        std::string known;
        for (const auto& c : table.columns)
          known += (known.empty() ? "" : ", ") + c;
        throw DataError(source + ": no column \"" + name + "\" (columns: " + known + ")");
      }
      return at - table.columns.begin();
    };
    const int64_t target = column(files.target);
    std::vector<std::vector<std::string>> groups = files.inputs;
    if (groups.empty()) {  // every other column, one input
      groups.emplace_back();
      for (const auto& c : table.columns)
        if (c != files.target && c != files.lengths)
          groups.back().push_back(c);
      if (groups.back().empty())
        throw DataError(source + ": no column besides the target \"" + files.target + "\"");
    }
    for (const auto& group : groups) {
      std::vector<int64_t> picked;
      std::string name;
      for (const auto& c : group) {
        picked.push_back(column(c));
        name += (name.empty() ? "" : "+") + c;
      }
      // float64 still: converted below, once its range is checked
      arrays->inputs.push_back(table.values.index_select(1, torch::tensor(picked, torch::kLong)));
      inputNames.push_back(name);
    }
    arrays->target = table.values.select(1, target).contiguous();
  } else {
    NamedArrays held;
    if (files.format == "npz") {
      held = readNpz(files.file);
    } else if (files.format == "mnist") {
      held = readMnist(files.file);
    } else if (files.format == "cifar10") {
      held = readCifar10(files.file);
    } else if (files.format == "images") {
      held = readImageFolder(files.file, files.image).arrays;
    } else if (files.format == "torch") {
      held = readTorchFile(files.file);
    } else {  // npy: every name is a file
      std::vector<std::string> names;
      for (const auto& group : files.inputs)
        names.push_back(group.front());
      names.push_back(files.target);
      if (!files.lengths.empty())
        names.push_back(files.lengths);
      for (const auto& name : names)
        if (std::none_of(held.begin(), held.end(), [&](const auto& a) { return a.first == name; }))
          held.emplace_back(name, readNpy(name));
    }
    const auto find = [&](const std::string& name) {
      for (const auto& [n, t] : held)
        if (n == name)
          return t;
      throw DataError(source + ": no array \"" + name + "\" (it holds: " + arrayNames(held) + ")");
    };
    for (const auto& group : files.inputs) {
      arrays->inputs.push_back(find(group.front()));
      inputNames.push_back(files.format == "npy"
                               ? std::filesystem::path(group.front()).filename().string()
                               : group.front());
    }
    arrays->target = find(files.target);
    if (!files.lengths.empty())
      lengths = find(files.lengths);
    if (files.format == "npy")
      targetName = std::filesystem::path(files.target).filename().string();
  }

  // Data, not parameters: a tensor saved with requires_grad (a module's nn.Parameter) joined every
  // step's autograd graph, and each backward added a gradient the size of the whole dataset into
  // it (steps 2000 times slower, the losses the same). Only numbers training takes: a complex
  // array was cast to its real part's integers. An array with a dimension of size 0 holds no
  // values whatever number of samples it claims (a file of bytes asking for billions).
  const auto plain = [&](torch::Tensor& t, const std::string& name) {
    t = t.detach();
    if (!t.is_floating_point() && !c10::isIntegralType(t.scalar_type(), /*includeBool=*/true))
      throw DataError(source + ": \"" + name + "\" holds " +
                      std::string(c10::toString(t.scalar_type())) +
                      " values; floating-point, integer or boolean arrays only");
    if (t.dim() > 0 && t.size(0) > 0 && t.numel() == 0)
      throw DataError(source + ": \"" + name + "\" holds no values: " + std::to_string(t.size(0)) +
                      " samples of shape " + shapeOf(t));
  };
  for (size_t i = 0; i < arrays->inputs.size(); ++i)
    plain(arrays->inputs[i], inputNames[i]);
  plain(arrays->target, targetName);
  if (lengths.defined())
    lengths = lengths.detach();

  // Every array holds the same samples.
  const int64_t samples = arrays->target.dim() == 0 ? 0 : arrays->target.size(0);
  const auto sameSamples = [&](const torch::Tensor& t, const std::string& name) {
    if (t.dim() == 0 || t.size(0) != samples)
      throw DataError(source + ": \"" + name + "\" holds " +
                      (t.dim() == 0 ? std::string("a scalar") : std::to_string(t.size(0))) +
                      " samples, the target \"" + targetName + "\" " + std::to_string(samples));
  };
  if (samples == 0)
    throw DataError(source + ": the target \"" + targetName + "\" holds no samples");
  // A NaN or an infinity trains every step to a NaN loss, unsaid: refused where it is (CSV's
  // reader already says the line and column). So is a float64 value beyond float32's range, an
  // infinity once converted: until 2026-12-07 only the float64 values were checked, and a target
  // of 1e39 trained to a NaN loss in a run reported completed.
  const auto finite = [&](const torch::Tensor& original, const torch::Tensor& converted,
                          const std::string& name) {
    const auto firstBad = [](const torch::Tensor& t) -> std::optional<int64_t> {
      if (!t.is_floating_point())
        return std::nullopt;
      const torch::Tensor bad = t.isfinite().logical_not();
      if (!bad.any().item<bool>())
        return std::nullopt;
      return bad.reshape({t.size(0), -1}).any(1).nonzero()[0][0].item<int64_t>();
    };
    if (const auto sample = firstBad(original))
      throw DataError(source + ": \"" + name + "\" holds a NaN or an infinity (sample " +
                      std::to_string(*sample) + ")");
    if (const auto sample = firstBad(converted))
      throw DataError(source + ": \"" + name +
                      "\" holds a value beyond float32's range, 3.4e38 (sample " +
                      std::to_string(*sample) + ")");
  };
  for (size_t i = 0; i < arrays->inputs.size(); ++i) {
    sameSamples(arrays->inputs[i], inputNames[i]);
    const torch::Tensor converted = asInput(arrays->inputs[i]);
    finite(arrays->inputs[i], converted, inputNames[i]);
    arrays->inputs[i] = converted;
  }

  // The target as the loss takes it.
  torch::Tensor target = arrays->target;
  finite(target, loss.classIndices() ? target : target.to(torch::kFloat), targetName);
  if (loss.classIndices()) {
    if (target.is_floating_point()) {
      if (target.ne(target.floor()).any().item<bool>())
        throw DataError(source + ": target \"" + targetName + "\" holds fractions; " + loss.kind +
                        " takes class indices");
    }
    target = target.to(torch::kLong);
    const torch::Tensor counted = target.masked_select(target.ne(loss.ignoreIndex));
    const torch::Tensor outside =
        counted.masked_select(counted.lt(0).logical_or(counted.ge(classes)));
    if (outside.numel() > 0)
      throw DataError(source + ": target \"" + targetName + "\": label " +
                      std::to_string(outside[0].item<int64_t>()) + " is outside the model's " +
                      std::to_string(classes) + " classes (model.classes)");
  } else {
    target = target.to(torch::kFloat);
  }
  arrays->target = target.contiguous();

  if (lengths.defined()) {
    sameSamples(lengths, files.lengths);
    if (lengths.dim() != 1 || lengths.is_floating_point())
      throw DataError(source + ": lengths \"" + files.lengths +
                      "\" must be one integer per sample");
    lengths = lengths.to(torch::kLong);
    // The padded length: a per-position target's dimension 1, else the first input's dimension
    // 1 that holds the longest sequence (an input of features [samples, k] before the tokens
    // does not count when k is shorter).
    const int64_t shortest = lengths.min().item<int64_t>(), longest = lengths.max().item<int64_t>();
    if (loss.classIndices() && arrays->target.dim() >= 2) {
      arrays->padded = arrays->target.size(1);
    } else {
      for (const auto& input : arrays->inputs)
        if (input.dim() >= 2 && input.size(1) >= longest) {
          arrays->padded = input.size(1);
          break;
        }
    }
    if (arrays->padded == 0)
      throw DataError(source + ": lengths \"" + files.lengths +
                      "\" but no input has a sequence dimension (samples, time, …) as long as "
                      "the longest, " +
                      std::to_string(longest));
    if (shortest < 1 || longest > arrays->padded)
      throw DataError(source + ": lengths \"" + files.lengths + "\" hold " +
                      std::to_string(shortest < 1 ? shortest : longest) + ", outside [1, " +
                      std::to_string(arrays->padded) + "] (the sequences' padded length)");
    if (!loss.classIndices() && arrays->target.dim() >= 2 &&
        arrays->target.size(1) == arrays->padded)
      throw DataError(source +
                      ": per-position targets with lengths need a class-index loss "
                      "(cross_entropy or nll), whose ignore_index masks the padding");
    arrays->lengths = lengths;
  }

  // Training and held-out samples.
  State& s = *state_;
  // At least one sample when a fraction is asked for: rounded to none, validation was off
  // without a word, validate_every and all.
  const auto held =
      std::max<int64_t>(files.validationFraction > 0 ? 1 : 0,
                        static_cast<int64_t>(std::llround(files.validationFraction * samples)));
  if (held >= samples)
    throw DataError(source + ": data.validation_fraction " +
                    std::to_string(files.validationFraction) + " of " + std::to_string(samples) +
                    " samples leaves none to train on");
  const torch::Tensor drawn = torch::randperm(samples, orderGenerator(data.seed, -1), torch::kLong);
  s.held = std::get<0>(drawn.narrow(0, 0, held).sort());
  s.train = std::get<0>(drawn.narrow(0, held, samples - held).sort());
  s.batchSize = batchSize > 0 ? batchSize : data.batchSize.value_or(0);
  if (s.batchSize <= 0)
    throw DataError(source + ": no batch size (data.batch_size)");
  const int64_t trainRows = s.train.size(0);
  s.perEpoch = trainRows / s.batchSize + (!files.dropLast && trainRows % s.batchSize != 0 ? 1 : 0);
  if (s.perEpoch == 0)
    throw DataError(source + ": data.batch_size " + std::to_string(s.batchSize) + " exceeds the " +
                    std::to_string(trainRows) + " training samples and drop_last drops the batch");
  s.seed = data.seed;
  s.shuffle = files.shuffle;
  s.dropLast = files.dropLast;
  s.workers = files.workers;
  if (files.bucketByLength)
    s.trainLengths = arrays->lengths.index_select(0, s.train);
  s.arrays = arrays;

  std::ostringstream text;
  text << std::filesystem::path(source).filename().string() << ": " << trainRows
       << " training samples";
  if (held > 0)
    text << " (" << held << " held out)";
  text << ", inputs ";
  for (size_t i = 0; i < arrays->inputs.size(); ++i)
    text << (i > 0 ? ", " : "") << inputNames[i] << " " << shapeOf(arrays->inputs[i]);
  text << "; target " << targetName << " " << shapeOf(arrays->target);
  s.description = text.str();
}

FileDataSource::~FileDataSource() {
  state_->it.reset();
  state_->loader.reset();
}

Batch FileDataSource::batch(int64_t index) {
  if (index < 0)
    throw std::out_of_range("batch " + std::to_string(index) + " of a file data source");
  State& s = *state_;
  if (!s.loader || index != s.next) {
    s.position(index);
  } else if (s.advance) {
    ++*s.it;
  }
  if (*s.it == s.loader->end())
    s.it = s.loader->begin();  // the next epoch: the sampler draws its order
  Batch b = std::move(**s.it);
  s.advance = true;
  s.next = index + 1;
  return b;
}

int64_t FileDataSource::batchSize() const {
  return state_->batchSize;
}
int64_t FileDataSource::trainingSamples() const {
  return state_->train.size(0);
}
int64_t FileDataSource::validationSamples() const {
  return state_->held.size(0);
}
int64_t FileDataSource::batchesPerEpoch() const {
  return state_->perEpoch;
}
const std::string& FileDataSource::description() const {
  return state_->description;
}

std::vector<Batch> FileDataSource::validationBatches() const {
  const State& s = *state_;
  std::vector<Batch> out;
  for (int64_t start = 0; start < s.held.size(0); start += s.batchSize) {
    const int64_t n = std::min(s.batchSize, s.held.size(0) - start);
    out.push_back(gather(*s.arrays, s.held.narrow(0, start, n)));
  }
  return out;
}

}  // namespace symtune
