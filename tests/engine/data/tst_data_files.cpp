// Data from files: the readers give the arrays NumPy and PyTorch wrote (tests/data/, made by
// make_test_data.py) in every layout they write them, and one line naming the file for what is
// wrong; FileDataSource batches them through torch::data in an order fixed by the seed, whatever
// order batches are asked for, cuts sequences to the batch's longest and holds samples out.

#include "doctest_torch.h"

#include <zlib.h>

#include <cmath>
#include <cstdint>

#include <torch/serialize.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "error_of.h"
#include "symtune/data/array_files.h"
#include "symtune/data/file_source.h"
#include "test_files.h"

namespace {

using symtune::test::errorOf;

const std::filesystem::path kData = std::filesystem::path(SYMTUNE_SOURCE_DIR) / "tests" / "data";

torch::Tensor named(const symtune::NamedArrays& arrays, const std::string& name) {
  for (const auto& [n, t] : arrays)
    if (n == name)
      return t;
  FAIL("no array " << name);
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

symtune::DataSpec blobsSpec(const std::string& format, const std::string& file,
                            std::vector<std::string> inputs, std::string target) {
  symtune::DataSpec spec;
  spec.seed = 5;
  spec.batchSize = 16;
  spec.files.format = format;
  spec.files.file = file.empty() ? std::filesystem::path() : kData / file;
  for (auto& name : inputs)
    spec.files.inputs.push_back({std::move(name)});
  spec.files.target = std::move(target);
  return spec;
}

symtune::DataSpec taggerSpec() {
  symtune::DataSpec spec = blobsSpec("npz", "tagger.npz", {"tokens", "lengths"}, "tags");
  spec.files.lengths = "lengths";
  return spec;
}

bool sameBatch(const symtune::Batch& a, const symtune::Batch& b) {
  if (a.size != b.size || a.inputs.size() != b.inputs.size() || !a.target.equal(b.target))
    return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (!a.inputs[i].toTensor().equal(b.inputs[i].toTensor()))
      return false;
  return true;
}

// An .npy file's bytes: version 1.0, `descr` and `shape` as written in its header, then `data`.
std::string npyBytes(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  const auto n = static_cast<uint16_t>(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(n & 0xff) +
         static_cast<char>(n >> 8) + header + data;
}

}  // namespace

TEST_CASE("npy, npz and torch.save's files give the same arrays in every layout") {
  const torch::Tensor x = symtune::readNpy(kData / "blobs_x.npy");  // float64, Fortran order
  const torch::Tensor y = symtune::readNpy(kData / "blobs_y.npy");  // int32
  CHECK(x.sizes() == torch::IntArrayRef({150, 4}));
  CHECK((x.scalar_type() == torch::kDouble));
  CHECK(x.is_contiguous());
  CHECK((y.scalar_type() == torch::kInt));
  CHECK(y.min().item<int>() == 0);
  CHECK(y.max().item<int>() == 2);
  const torch::Tensor xf = x.to(torch::kFloat);

  const auto npz = symtune::readNpz(kData / "blobs.npz");  // numpy.savez: stored members
  CHECK(symtune::arrayNames(npz) == "x, y");
  CHECK(named(npz, "x").equal(xf));
  CHECK(named(npz, "y").equal(y));

  // blobs_saved_on_gpu.pt names cuda:0 for its storages, as torch.save writes them from a GPU:
  // until 2026-12-07 it was refused without one ("Found no NVIDIA driver") and, with one, its
  // arrays stayed on the GPU. Read onto the CPU, where batches are built.
  for (const char* file : {"blobs_dict.pt", "blobs_module.pt", "blobs_saved_on_gpu.pt"}) {
    INFO(std::string(file));
    const auto saved = symtune::readTorchFile(kData / file);
    CHECK(named(saved, "x").equal(xf));
    CHECK(named(saved, "y").equal(y.to(torch::kLong)));
  }
  const auto tuple = symtune::readTorchFile(kData / "blobs_tuple.pt");
  CHECK(symtune::arrayNames(tuple) == "0, 1");
  CHECK(named(tuple, "0").equal(xf));

  const auto tagger = symtune::readNpz(kData / "tagger.npz");  // savez_compressed: deflated
  CHECK(symtune::arrayNames(tagger) == "tokens, lengths, tags");
  CHECK(named(tagger, "tokens").sizes() == torch::IntArrayRef({96, 10}));

  const torch::Tensor big = symtune::readNpy(kData / "big_endian.npy");
  CHECK(big.equal(torch::arange(6, torch::kFloat).reshape({2, 3})));

  const symtune::CsvTable csv = symtune::readCsv(kData / "regression.csv");
  CHECK(csv.columns == std::vector<std::string>{"x1", "x2", "x3", "y"});
  CHECK(csv.values.sizes() == torch::IntArrayRef({80, 4}));
}

TEST_CASE("a damaged or wrong file is one line naming it") {
  symtune::test::TempDir dir;
  const std::string npy = symtune::test::readFile(kData / "blobs_y.npy");
  symtune::test::writeFile(dir.path() / "short.npy", npy.substr(0, npy.size() - 10));
  CHECK(contains(errorOf([&] { symtune::readNpy(dir.path() / "short.npy"); }),
                 "short.npy: truncated: 600 bytes of data expected, 590 found"));
  CHECK(errorOf([&] { symtune::readNpy(dir.path() / "none.npy"); }) ==
        (dir.path() / "none.npy").string() + ": no such file");
  symtune::test::writeFile(dir.path() / "text.npy", "hello");
  CHECK(contains(errorOf([&] { symtune::readNpy(dir.path() / "text.npy"); }),
                 "text.npy: not an .npy array"));
  // Shapes past int64 (stoll threw out_of_range; a product that wrapped passed the size check).
  symtune::test::writeFile(dir.path() / "wide.npy",
                           npyBytes("<f4", "(99999999999999999999999, 4)", ""));
  CHECK(contains(errorOf([&] { symtune::readNpy(dir.path() / "wide.npy"); }),
                 "wide.npy: not an .npy array: shape (99999999999999999999999, 4)"));
  symtune::test::writeFile(dir.path() / "wraps.npy",
                           npyBytes("<f4", "(10, 999999999999999999)", ""));
  CHECK(contains(errorOf([&] { symtune::readNpy(dir.path() / "wraps.npy"); }),
                 "wraps.npy: its shape (10, 999999999999999999) holds more values than int64"));
  // numpy writes '|O' for object arrays: two characters, which the length check refused first
  // as an unsupported dtype, never saying why.
  symtune::test::writeFile(dir.path() / "objects.npy", npyBytes("|O", "(2,)", ""));
  CHECK(contains(errorOf([&] { symtune::readNpy(dir.path() / "objects.npy"); }),
                 "objects.npy: holds Python objects (a pickled object array)"));

  // A stored member whose bytes changed fails its CRC.
  std::string npz = symtune::test::readFile(kData / "blobs.npz");
  npz[npz.size() / 3] = static_cast<char>(npz[npz.size() / 3] ^ 0x5a);
  symtune::test::writeFile(dir.path() / "bad.npz", npz);
  CHECK(contains(errorOf([&] { symtune::readNpz(dir.path() / "bad.npz"); }), "bad.npz: "));

  // A deflated member whose declared size is a lie: refused before 2 GB were allocated for it.
  std::string lying = symtune::test::readFile(kData / "tagger.npz");
  const size_t central = lying.find("PK\x01\x02");
  REQUIRE(central != std::string::npos);
  lying.replace(central + 24, 4, std::string("\x00\xff\xff\x7f", 4));
  symtune::test::writeFile(dir.path() / "lying.npz", lying);
  CHECK(contains(errorOf([&] { symtune::readNpz(dir.path() / "lying.npz"); }),
                 "lying.npz: tokens.npy: corrupt (it declares 2147483392 bytes from "));

  symtune::test::writeFile(dir.path() / "bad.csv", "a,b\n1,2\n3,x\n");
  CHECK(errorOf([&] { symtune::readCsv(dir.path() / "bad.csv"); }) ==
        (dir.path() / "bad.csv").string() + ":3: column \"b\": \"x\" is not a number");
  symtune::test::writeFile(dir.path() / "missing.csv", "a,b\n1,2\nnan,4\n");
  CHECK(errorOf([&] { symtune::readCsv(dir.path() / "missing.csv"); }) ==
        (dir.path() / "missing.csv").string() +
            ":3: column \"a\": \"nan\" is not a finite number (fill or drop the row)");
  // A spreadsheet's byte-order mark is not part of the first column's name.
  symtune::test::writeFile(dir.path() / "bom.csv",
                           "\xEF\xBB\xBF"
                           "a,b\n1,2\n");
  CHECK(symtune::readCsv(dir.path() / "bom.csv").columns == std::vector<std::string>{"a", "b"});
  symtune::test::writeFile(dir.path() / "ragged.csv", "a,b\n1,2\n3\n");
  CHECK(errorOf([&] { symtune::readCsv(dir.path() / "ragged.csv"); }) ==
        (dir.path() / "ragged.csv").string() + ":3: 1 fields, the header has 2");

  const std::string blobs = (kData / "blobs.npz").string();
  const symtune::LossSpec loss;
  CHECK(errorOf([&] {
          symtune::FileDataSource(blobsSpec("npz", "blobs.npz", {"features"}, "y"), loss, 3);
        }) == blobs + ": no array \"features\" (it holds: x, y)");
  CHECK(errorOf([&] {
          symtune::FileDataSource(blobsSpec("npz", "blobs.npz", {"x"}, "y"), loss, 2);
        }) == blobs + ": target \"y\": label 2 is outside the model's 2 classes (model.classes)");
  CHECK(errorOf([&] {
          symtune::FileDataSource(blobsSpec("npz", "blobs.npz", {"y"}, "x"), loss, 3);
        }) == blobs + ": target \"x\" holds fractions; cross_entropy takes class indices");
  symtune::DataSpec uneven;
  uneven.batchSize = 4;
  uneven.files.format = "npy";
  uneven.files.inputs = {{(kData / "blobs_x.npy").string()}};
  uneven.files.target = (kData / "big_endian.npy").string();
  CHECK(errorOf([&] { symtune::FileDataSource(uneven, loss, 6); }) ==
        (kData / "big_endian.npy").string() +
            ": \"blobs_x.npy\" holds 150 samples, the target \"big_endian.npy\" 2");
  symtune::DataSpec mixed = blobsSpec("npz", "tagger.npz", {"tokens"}, "tags");
  mixed.files.file = kData / "tagger.npz";
  mixed.files.lengths = "tags";
  CHECK(contains(errorOf([&] { symtune::FileDataSource(mixed, loss, 3); }),
                 "lengths \"tags\" must be one integer per sample"));
  // A NaN in an input array trained every step to a NaN loss, unsaid.
  const float values[] = {1.0F, std::nanf(""), 2.0F, 3.0F};
  symtune::test::writeFile(
      dir.path() / "nan_x.npy",
      npyBytes("<f4", "(2, 2)", std::string(reinterpret_cast<const char*>(values), sizeof values)));
  const int64_t labels[] = {0, 1};
  symtune::test::writeFile(
      dir.path() / "nan_y.npy",
      npyBytes("<i8", "(2,)", std::string(reinterpret_cast<const char*>(labels), sizeof labels)));
  symtune::DataSpec nan;
  nan.batchSize = 2;
  nan.files.format = "npy";
  nan.files.inputs = {{(dir.path() / "nan_x.npy").string()}};
  nan.files.target = (dir.path() / "nan_y.npy").string();
  CHECK(contains(errorOf([&] { symtune::FileDataSource(nan, loss, 2); }),
                 ": \"nan_x.npy\" holds a NaN or an infinity (sample 0)"));
  // Finite in float64, an infinity in the float32 the model reads: until 2026-12-07 the check ran
  // on the float64 values, and the run trained to a NaN loss, reported completed.
  const double wide[] = {1.0, 2.0, 1e39, 3.0};
  symtune::test::writeFile(
      dir.path() / "wide_x.npy",
      npyBytes("<f8", "(2, 2)", std::string(reinterpret_cast<const char*>(wide), sizeof wide)));
  nan.files.inputs = {{(dir.path() / "wide_x.npy").string()}};
  CHECK(contains(errorOf([&] { symtune::FileDataSource(nan, loss, 2); }),
                 ": \"wide_x.npy\" holds a value beyond float32's range, 3.4e38 (sample 1)"));
  symtune::test::writeFile(dir.path() / "wide.csv", "a,y\n1,2\n3,-1e39\n");
  symtune::DataSpec csv;
  csv.batchSize = 2;
  csv.files.format = "csv";
  csv.files.file = dir.path() / "wide.csv";
  csv.files.target = "y";
  symtune::LossSpec mse;
  mse.kind = "mse";
  CHECK(contains(errorOf([&] { symtune::FileDataSource(csv, mse, 1); }),
                 ": \"y\" holds a value beyond float32's range, 3.4e38 (sample 1)"));
  symtune::DataSpec held = blobsSpec("npz", "blobs.npz", {"x"}, "y");
  held.files.validationFraction = 0.999;
  CHECK(contains(errorOf([&] { symtune::FileDataSource(held, loss, 3); }),
                 "samples leaves none to train on"));
  // A fraction that rounds to no sample holds one out: rounded to none, validation was off.
  held.files.validationFraction = 0.001;
  const symtune::FileDataSource few(held, loss, 3);
  CHECK(few.validationSamples() == 1);
  CHECK(few.trainingSamples() == 149);
  // A batch size past the samples, without drop_last: one batch of them all (the count of
  // batches overflowed at int64's largest).
  symtune::DataSpec huge = blobsSpec("npz", "blobs.npz", {"x"}, "y");
  huge.batchSize = std::numeric_limits<int64_t>::max();
  CHECK(symtune::FileDataSource(huge, loss, 3).batchesPerEpoch() == 1);
}

TEST_CASE("batch i is the same however batches are asked for, each epoch a new order") {
  const symtune::LossSpec loss;
  symtune::DataSpec spec = blobsSpec("npz", "blobs.npz", {"x"}, "y");
  spec.files.validationFraction = 0.2;
  symtune::FileDataSource data(spec, loss, 3);
  CHECK(data.trainingSamples() == 120);
  CHECK(data.validationSamples() == 30);
  CHECK(data.batchesPerEpoch() == 8);  // 120 / 16, the last batch of 8
  CHECK(data.description() ==
        "blobs.npz: 120 training samples (30 held out), inputs x [4] Float; "
        "target y [] Long");

  std::vector<symtune::Batch> inOrder;
  for (int64_t i = 0; i < 20; ++i)
    inOrder.push_back(data.batch(i));
  CHECK(inOrder[7].size == 8);
  CHECK(inOrder[8].size == 16);

  // Each epoch holds every training sample once, and the two epochs' orders differ.
  const symtune::FileDataSource whole(blobsSpec("npz", "blobs.npz", {"x"}, "y"), loss, 3);
  const auto rowsOf = [&](int64_t from, int64_t to) {
    std::vector<torch::Tensor> xs;
    for (int64_t i = from; i < to; ++i)
      xs.push_back(inOrder[static_cast<size_t>(i)].inputs[0].toTensor());
    return torch::cat(xs);
  };
  const torch::Tensor epoch0 = rowsOf(0, 8), epoch1 = rowsOf(8, 16);
  CHECK(epoch0.size(0) == 120);
  CHECK(std::get<0>(epoch0.sum(1).sort()).allclose(std::get<0>(epoch1.sum(1).sort())));
  CHECK_FALSE(epoch0.equal(epoch1));

  // Held-out samples never reach training.
  std::set<double> heldSums, trainSums;
  for (const auto& b : data.validationBatches())
    for (int64_t r = 0; r < b.size; ++r)
      heldSums.insert(b.inputs[0].toTensor()[r].sum().item<double>());
  for (int64_t r = 0; r < epoch0.size(0); ++r)
    trainSums.insert(epoch0[r].sum().item<double>());
  CHECK(heldSums.size() == 30);
  for (double s : heldSums)
    CHECK(trainSums.count(s) == 0);

  // Out of order, again and with prefetching workers: the same batches.
  symtune::DataSpec workers = spec;
  workers.files.workers = 2;
  symtune::FileDataSource prefetching(workers, loss, 3);
  for (int64_t i : {12, 3, 4, 5, 19, 0, 1, 9, 10, 11}) {
    INFO("batch ", i);
    CHECK(sameBatch(data.batch(i), inOrder[static_cast<size_t>(i)]));
    CHECK(sameBatch(prefetching.batch(i), inOrder[static_cast<size_t>(i)]));
  }

  // Without shuffling: the files' order, every epoch; drop_last: whole batches only.
  symtune::DataSpec plain = blobsSpec("npz", "blobs.npz", {"x"}, "y");
  plain.files.shuffle = false;
  plain.files.dropLast = true;
  symtune::FileDataSource ordered(plain, loss, 3);
  CHECK(ordered.batchesPerEpoch() == 9);
  const torch::Tensor xs = symtune::readNpy(kData / "blobs_x.npy").to(torch::kFloat);
  CHECK(ordered.batch(0).inputs[0].toTensor().equal(xs.narrow(0, 0, 16)));
  CHECK(ordered.batch(9).inputs[0].toTensor().equal(xs.narrow(0, 0, 16)));
  CHECK(ordered.batch(8).size == 16);
}

TEST_CASE("sequences are cut to the batch's longest, the padding ignored by the loss") {
  const symtune::LossSpec loss;
  symtune::FileDataSource data(taggerSpec(), loss, 3);
  const auto arrays = symtune::readNpz(kData / "tagger.npz");
  const torch::Tensor allLengths = named(arrays, "lengths");
  for (int64_t i = 0; i < 8; ++i) {
    INFO("batch ", i);
    const symtune::Batch b = data.batch(i);
    REQUIRE(b.inputs.size() == 2);
    const torch::Tensor tokens = b.inputs[0].toTensor(), lengths = b.inputs[1].toTensor();
    const int64_t longest = lengths.max().item<int64_t>();
    CHECK(tokens.sizes() == torch::IntArrayRef({b.size, longest}));
    CHECK(b.target.sizes() == torch::IntArrayRef({b.size, longest}));
    CHECK(b.sequenceLength() == longest);
    const torch::Tensor past = torch::arange(longest).unsqueeze(0).ge(lengths.unsqueeze(1));
    CHECK(b.target.masked_select(past).eq(-100).all().item<bool>());
    CHECK(b.target.masked_select(past.logical_not())
              .equal(tokens.masked_select(past.logical_not()).remainder(3)));
  }
  CHECK(data.description() ==
        "tagger.npz: 96 training samples, inputs tokens [10] Long, "
        "lengths [] Long; target tags [10] Long");
}

TEST_CASE("CSV columns are inputs by name, every other column by default") {
  symtune::LossSpec mse;
  mse.kind = "mse";
  symtune::DataSpec spec = blobsSpec("csv", "regression.csv", {}, "y");
  symtune::FileDataSource all(spec, mse, 1);
  symtune::Batch b = all.batch(0);
  CHECK(b.inputs[0].toTensor().sizes() == torch::IntArrayRef({16, 3}));
  CHECK((b.target.scalar_type() == torch::kFloat));
  spec.files.inputs = {{"x3", "x1"}};
  symtune::FileDataSource picked(spec, mse, 1);
  const symtune::CsvTable table = symtune::readCsv(kData / "regression.csv");
  spec.files.shuffle = false;
  symtune::FileDataSource ordered(spec, mse, 1);
  CHECK(ordered.batch(0).inputs[0].toTensor().allclose(
      table.values.narrow(0, 0, 16).index_select(1, torch::tensor({2, 0})).to(torch::kFloat)));
  spec.files.inputs = {{"x4"}};
  CHECK(contains(errorOf([&] { symtune::FileDataSource(spec, mse, 1); }),
                 "regression.csv: no column \"x4\" (columns: x1, x2, x3, y)"));
}

TEST_CASE("MNIST's IDX files and CIFAR-10's binary batches read as images and labels") {
  const auto mnist = symtune::readMnist(kData / "mnist");  // images gzipped, labels plain
  CHECK(symtune::arrayNames(mnist) == "images, labels");
  const torch::Tensor images = named(mnist, "images"), labels = named(mnist, "labels");
  CHECK(images.sizes() == torch::IntArrayRef({40, 1, 28, 28}));
  CHECK(images.max().item<float>() == 1.0f);
  // make_test_data.py paints a bright square whose row is twice the digit, plus two.
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t row = 2 + 2 * labels[i].item<int64_t>();
    CHECK(images[i][0][row][12].item<float>() == 1.0f);
  }
  const auto cifar = symtune::readCifar10(kData / "cifar10");  // both batches, in name order
  CHECK(named(cifar, "images").sizes() == torch::IntArrayRef({12, 3, 32, 32}));
  const auto first = symtune::readCifar10(kData / "cifar10" / "data_batch_1.bin");
  CHECK(named(first, "labels").equal(named(cifar, "labels").narrow(0, 0, 8)));

  symtune::DataSpec spec;
  spec.batchSize = 8;
  spec.files.format = "mnist";
  spec.files.file = kData / "mnist";
  spec.files.inputs = {{"images"}};
  spec.files.target = "labels";
  symtune::FileDataSource data(spec, symtune::LossSpec{}, 10);
  CHECK(data.batch(0).inputs[0].toTensor().sizes() == torch::IntArrayRef({8, 1, 28, 28}));
  CHECK(errorOf([&] { symtune::readMnist(kData / "cifar10"); }) ==
        (kData / "cifar10").string() +
            ": no train-images-idx3-ubyte (nor train-images-idx3-ubyte.gz): an MNIST folder "
            "holds its IDX files");
  CHECK(errorOf([&] { symtune::readCifar10(kData / "big_endian.npy"); }) ==
        (kData / "big_endian.npy").string() +
            ": 152 bytes is not a whole number of CIFAR-10 records (3073 bytes each)");
}

namespace {

// `bytes` as gzip writes them.
std::string gzipped(const std::string& bytes) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

// An IDX file holds what its header declares, no more: until 2026-12-07 the bytes beyond were
// read (gunzipped whole first: a 306 KB file of 300 MB of zeros was taken as one image).
TEST_CASE("an IDX file with more than its header declares is refused, gzipped or not") {
  symtune::test::TempDir dir;
  const std::string labels = symtune::test::readFile(kData / "mnist" / "train-labels-idx1-ubyte");
  REQUIRE(labels.size() == 48);  // 8 bytes of header, 40 labels
  symtune::test::writeFile(dir.path() / "plain-idx1-ubyte", labels + std::string(5, '\0'));
  CHECK(errorOf([&] { symtune::readIdx(dir.path() / "plain-idx1-ubyte"); }) ==
        (dir.path() / "plain-idx1-ubyte").string() + ": 5 bytes beyond the 40 its header declares");
  symtune::test::writeFile(dir.path() / "bomb-idx1-ubyte.gz",
                           gzipped(labels + std::string(size_t{64} << 20, '\0')));
  CHECK(errorOf([&] { symtune::readIdx(dir.path() / "bomb-idx1-ubyte.gz"); }) ==
        (dir.path() / "bomb-idx1-ubyte.gz").string() +
            ": holds more than the 48 bytes its header declares");
  symtune::test::writeFile(dir.path() / "exact-idx1-ubyte.gz", gzipped(labels));
  CHECK(symtune::readIdx(dir.path() / "exact-idx1-ubyte.gz")
            .equal(symtune::readIdx(kData / "mnist" / "train-labels-idx1-ubyte")));
  symtune::test::writeFile(dir.path() / "cut-idx1-ubyte.gz", gzipped(labels).substr(0, 20));
  CHECK(errorOf([&] { symtune::readIdx(dir.path() / "cut-idx1-ubyte.gz"); }) ==
        (dir.path() / "cut-idx1-ubyte.gz").string() + ": not a complete gzip file");
}

TEST_CASE("the padded length is the sequences', whatever input comes first") {
  // Per-sample features [N, 4] before tokens [N, 10]: the cut is at the tokens' length.
  const auto tagger = symtune::readNpz(kData / "tagger.npz");
  c10::Dict<std::string, torch::Tensor> arrays;
  const torch::Tensor tokens = named(tagger, "tokens");
  arrays.insert("features", torch::ones({tokens.size(0), 4}));
  arrays.insert("tokens", tokens);
  arrays.insert("lengths", named(tagger, "lengths"));
  arrays.insert("tags", named(tagger, "tags"));
  symtune::test::TempDir dir;
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(arrays));
  symtune::test::writeFile(dir.path() / "mixed.pt", std::string(bytes.begin(), bytes.end()));

  symtune::DataSpec spec = taggerSpec();
  spec.files.format = "torch";
  spec.files.file = dir.path() / "mixed.pt";
  spec.files.inputs = {{"features"}, {"tokens"}, {"lengths"}};
  symtune::FileDataSource data(spec, symtune::LossSpec{}, 3);
  const symtune::Batch b = data.batch(0);
  const int64_t longest = b.inputs[2].toTensor().max().item<int64_t>();
  CHECK(b.inputs[0].toTensor().sizes() == torch::IntArrayRef({16, 4}));
  CHECK(b.inputs[1].toTensor().sizes() == torch::IntArrayRef({16, longest}));
  CHECK(b.target.sizes() == torch::IntArrayRef({16, longest}));
}

TEST_CASE("data is kept out of autograd; what training cannot take is refused, naming it") {
  symtune::test::TempDir dir;
  const auto save = [&](const std::string& name, const torch::Tensor& x) {
    c10::Dict<std::string, torch::Tensor> arrays;
    arrays.insert("x", x);
    arrays.insert("y", torch::tensor({0, 1, 0, 1, 0, 1, 0, 1}));
    const std::vector<char> bytes = torch::pickle_save(c10::IValue(arrays));
    symtune::test::writeFile(dir.path() / name, std::string(bytes.begin(), bytes.end()));
    symtune::DataSpec spec = blobsSpec("torch", "", {"x"}, "y");
    spec.files.file = dir.path() / name;
    spec.batchSize = 4;
    return spec;
  };
  // A module's nn.Parameter, or torch.save of a tensor that requires grad: each batch joined the
  // step's autograd graph, and every backward added a gradient the size of the data into it.
  const symtune::DataSpec parameter = save("grad.pt", torch::randn({8, 3}).requires_grad_());
  symtune::FileDataSource data(parameter, symtune::LossSpec{}, 2);
  CHECK_FALSE(data.batch(0).inputs[0].toTensor().requires_grad());
  const std::string complex = (dir.path() / "complex.pt").string();
  CHECK(errorOf([&] {
          symtune::FileDataSource(save("complex.pt", torch::randn({8, 3}, torch::kComplexFloat)),
                                  symtune::LossSpec{}, 2);
        }) == complex +
                  ": \"x\" holds ComplexFloat values; floating-point, integer or boolean arrays "
                  "only");
  const std::string empty = (dir.path() / "empty.pt").string();
  CHECK(errorOf([&] {
          symtune::FileDataSource(save("empty.pt", torch::zeros({8, 0})), symtune::LossSpec{}, 2);
        }) == empty + ": \"x\" holds no values: 8 samples of shape [0] Float");
  // A column named twice read the first column for both.
  symtune::test::writeFile(dir.path() / "twice.csv", "a,a,y\n1,10,0\n2,20,1\n");
  CHECK(errorOf([&] { symtune::readCsv(dir.path() / "twice.csv"); }) ==
        (dir.path() / "twice.csv").string() +
            ":1: column \"a\" is named twice in the header (columns 1 and 2)");
  // Bucketed by length with a batch size near int64's largest: twenty batches of it overflowed
  // into a pool of nothing, and the order grew without end.
  symtune::DataSpec huge = taggerSpec();
  huge.files.bucketByLength = true;
  huge.batchSize = int64_t{1} << 62;
  symtune::FileDataSource all(huge, symtune::LossSpec{}, 3);
  CHECK(all.batchesPerEpoch() == 1);
  CHECK(all.batch(0).target.size(0) == all.trainingSamples());
}

TEST_CASE("bucketing by length: batches of like length, every sample once an epoch") {
  const auto spreadOver = [](symtune::FileDataSource& data, int64_t from, int64_t to) {
    int64_t spread = 0;
    std::vector<torch::Tensor> tokens;
    for (int64_t i = from; i < to; ++i) {
      const symtune::Batch b = data.batch(i);
      const torch::Tensor lengths = b.inputs[1].toTensor();
      spread += lengths.max().item<int64_t>() - lengths.min().item<int64_t>();
      tokens.push_back(b.inputs[0].toTensor().sum(1));
    }
    return std::pair{spread, std::get<0>(torch::cat(tokens).sort())};
  };
  symtune::DataSpec plain = taggerSpec();
  plain.batchSize = 8;
  symtune::DataSpec bucketed = plain;
  bucketed.files.bucketByLength = true;
  symtune::FileDataSource a(plain, symtune::LossSpec{}, 3), b(bucketed, symtune::LossSpec{}, 3);
  REQUIRE(b.batchesPerEpoch() == 12);
  const auto [plainSpread, plainSamples] = spreadOver(a, 0, 12);
  const auto [bucketSpread, bucketSamples] = spreadOver(b, 12, 24);  // the second epoch
  MESSAGE("summed length spread within batches over an epoch: ", plainSpread, " shuffled, ",
          bucketSpread, " bucketed");
  CHECK(bucketSpread * 4 < plainSpread);
  CHECK(bucketSamples.equal(plainSamples));  // the same samples, each once
  // Deterministic, and again out of order.
  symtune::FileDataSource again(bucketed, symtune::LossSpec{}, 3);
  CHECK(sameBatch(again.batch(17), b.batch(17)));
}

TEST_CASE("bucketing by length under drop_last leaves out samples as drawn, not the longest") {
  // The samples past an epoch's whole batches make its short last batch, which drop_last leaves
  // out. Cut from the order sorted by length, they were the longest of the last pool every epoch.
  symtune::DataSpec spec = taggerSpec();
  spec.batchSize = 10;
  spec.files.bucketByLength = true;
  symtune::DataSpec all = spec;
  spec.files.dropLast = true;
  symtune::FileDataSource whole(all, symtune::LossSpec{}, 3),
      dropping(spec, symtune::LossSpec{}, 3);
  const int64_t samples = dropping.trainingSamples(), perEpoch = dropping.batchesPerEpoch();
  const int64_t left = samples - perEpoch * dropping.batchSize();
  REQUIRE(left > 0);
  REQUIRE(whole.batchesPerEpoch() == perEpoch + 1);
  std::vector<torch::Tensor> lengths;
  for (int64_t i = 0; i < whole.batchesPerEpoch(); ++i)
    lengths.push_back(whole.batch(i).inputs[1].toTensor());
  const torch::Tensor sorted = std::get<0>(torch::cat(lengths).sort(0, /*descending=*/true));
  REQUIRE(sorted.size(0) == samples);
  const double total = sorted.sum().item<double>();
  const double mean = total / static_cast<double>(samples);
  const double longest = sorted.narrow(0, 0, left).to(torch::kDouble).mean().item<double>();
  REQUIRE(longest > mean + 1);
  constexpr int64_t kEpochs = 20;
  double dropped = 0;
  for (int64_t e = 0; e < kEpochs; ++e) {
    double visited = 0;
    for (int64_t i = e * perEpoch; i < (e + 1) * perEpoch; ++i)
      visited += dropping.batch(i).inputs[1].toTensor().sum().item<double>();
    dropped += total - visited;
  }
  const double droppedMean = dropped / static_cast<double>(kEpochs * left);
  MESSAGE("mean length: ", mean, " of all, ", longest, " of the ", left, " longest, ", droppedMean,
          " of those drop_last left out over ", kEpochs, " epochs");
  CHECK(droppedMean < (mean + longest) / 2);
}
