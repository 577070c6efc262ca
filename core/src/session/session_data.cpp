#include "session_data.h"

#include <set>

namespace symtune::detail {

namespace {

std::string inQuotes(const std::string& s) {
  return "\"" + s + "\"";
}

// One array's name: a string, not empty.
std::string arrayName(const nlohmann::json& value, const std::string& field,
                      const JsonFields& data) {
  if (!value.is_string() || value.get<std::string>().empty())
    data.failFn()(field, "expected the name of an array, found " + describeJsonType(value));
  return value.get<std::string>();
}

std::filesystem::path resolved(const std::string& name, const std::filesystem::path& origin) {
  std::filesystem::path p = name;
  if (p.is_relative())
    p = origin.parent_path() / p;
  return p.lexically_normal();
}

}  // namespace

DataSpec parseDataBlock(const JsonFields& data, const std::filesystem::path& origin) {
  data.rejectUnknown({"seed", "batch_size", "format", "file", "inputs", "target", "lengths",
                      "shuffle", "drop_last", "workers", "validation_fraction", "validate_every",
                      "bucket_by_length"});
  DataSpec spec;
  const int64_t seed = data.integer("seed", 0);
  if (seed < 0)
    data.fail("seed", "expected a non-negative integer, found " + std::to_string(seed));
  spec.seed = static_cast<uint64_t>(seed);
  if (data.has("batch_size")) {
    const int64_t b = data.integer("batch_size");
    if (b <= 0)
      data.fail("batch_size", "expected a positive integer, found " + std::to_string(b));
    spec.batchSize = b;
  }
  if (!data.has("format")) {
    for (const char* key :
         {"file", "inputs", "target", "lengths", "shuffle", "drop_last", "workers",
          "validation_fraction", "validate_every", "bucket_by_length"}) {
      if (data.has(key))
        data.fail(key,
                  "needs data.format (npy, npz, torch, csv, mnist or cifar10): without it "
                  "the data is synthetic");
    }
    return spec;
  }

  DataFilesSpec& files = spec.files;
  files.format = data.string("format");
  const std::set<std::string> formats = {"npy", "npz", "torch", "csv", "mnist", "cifar10"};
  if (formats.count(files.format) == 0)
    data.fail("format", "expected one of npy, npz, torch, csv, mnist, cifar10, found " +
                            inQuotes(files.format));
  const bool npy = files.format == "npy", csv = files.format == "csv";
  // MNIST and CIFAR-10 hold two arrays, "images" and "labels": the input and the target unless
  // the session says otherwise.
  const bool images = files.format == "mnist" || files.format == "cifar10";
  if (npy && data.has("file"))
    data.fail("file",
              "npy arrays are one per file: name the files in data.inputs and "
              "data.target");
  if (!npy) {
    const std::string file = data.string("file");
    if (file.empty())
      data.fail("file", "expected a path to the " + files.format + " file, found \"\"");
    files.file = resolved(file, origin);
  }
  // npy names are files beside the session.
  const auto name = [&](const nlohmann::json& value, const std::string& field) {
    const std::string n = arrayName(value, field, data);
    return npy ? resolved(n, origin).string() : n;
  };

  files.target = images && !data.has("target")
                     ? "labels"
                     : name(data.require("target"), data.fieldPath("target"));
  if (data.has("inputs")) {
    const nlohmann::json& list = data.require("inputs");
    if (!list.is_array() || list.empty())
      data.fail("inputs",
                "expected a non-empty array of array names, found " + describeJsonType(list));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = data.fieldPath("inputs") + "[" + std::to_string(i) + "]";
      if (csv && list[i].is_array()) {  // a group of columns, one input
        if (list[i].empty())
          data.failFn()(field, "expected a non-empty array of column names, found []");
        std::vector<std::string> group;
        for (size_t c = 0; c < list[i].size(); ++c)
          group.push_back(name(list[i][c], field + "[" + std::to_string(c) + "]"));
        files.inputs.push_back(std::move(group));
      } else {
        files.inputs.push_back({name(list[i], field)});
      }
    }
  } else if (images) {
    files.inputs = {{"images"}};
  } else if (!csv) {
    data.fail("inputs", "missing: the arrays the model's forward takes, in order");
  }
  if (data.has("lengths"))
    files.lengths = name(data.require("lengths"), data.fieldPath("lengths"));
  files.bucketByLength = data.boolean("bucket_by_length", false);
  if (files.bucketByLength && files.lengths.empty())
    data.fail("bucket_by_length", "needs data.lengths, the lengths it buckets by");
  files.shuffle = data.boolean("shuffle", files.shuffle);
  if (files.bucketByLength && !files.shuffle)
    data.fail("bucket_by_length", "buckets a shuffled order: it needs data.shuffle");
  files.dropLast = data.boolean("drop_last", files.dropLast);
  const int64_t workers = data.integer("workers", 0);
  if (workers < 0 || workers > 64)
    data.fail("workers", "expected an integer in [0, 64], found " + std::to_string(workers));
  files.workers = static_cast<int>(workers);
  files.validationFraction = data.number("validation_fraction", 0);
  if (!(files.validationFraction >= 0 && files.validationFraction < 1))
    data.fail("validation_fraction", "expected a number in [0, 1)");
  files.validateEvery = data.integer("validate_every", 0);
  if (files.validateEvery < 0)
    data.fail("validate_every",
              "expected a non-negative integer, found " + std::to_string(files.validateEvery));
  if (files.validateEvery > 0 && files.validationFraction == 0)
    data.fail("validate_every", "needs data.validation_fraction, the samples it validates on");
  return spec;
}

LossSpec parseLossBlock(const JsonFields& loss) {
  loss.rejectUnknown({"kind", "ignore_index", "label_smoothing", "beta"});
  LossSpec spec;
  spec.kind = loss.string("kind", spec.kind);
  const std::set<std::string> kinds = {"cross_entropy",  "nll", "mse", "l1", "smooth_l1",
                                       "bce_with_logits"};
  if (kinds.count(spec.kind) == 0)
    loss.fail("kind",
              "expected one of cross_entropy, nll, mse, l1, smooth_l1, bce_with_logits, "
              "found " +
                  inQuotes(spec.kind));
  const auto only = [&](const char* key, bool allowed, const char* which) {
    if (loss.has(key) && !allowed)
      loss.fail(key, std::string("applies to ") + which + " only, not " + spec.kind);
  };
  only("ignore_index", spec.classIndices(), "cross_entropy and nll");
  only("label_smoothing", spec.kind == "cross_entropy", "cross_entropy");
  only("beta", spec.kind == "smooth_l1", "smooth_l1");
  spec.ignoreIndex = loss.integer("ignore_index", spec.ignoreIndex);
  spec.labelSmoothing = loss.number("label_smoothing", 0);
  if (!(spec.labelSmoothing >= 0 && spec.labelSmoothing <= 1))
    loss.fail("label_smoothing", "expected a number in [0, 1]");
  spec.beta = loss.number("beta", spec.beta);
  if (!(spec.beta > 0))
    loss.fail("beta", "expected a positive number");
  return spec;
}

nlohmann::json dataJson(const DataSpec& data) {
  nlohmann::json out = {{"seed", data.seed}};
  if (data.batchSize)
    out["batch_size"] = *data.batchSize;
  const DataFilesSpec& files = data.files;
  if (!files.enabled())
    return out;
  out["format"] = files.format;
  if (files.format != "npy")
    out["file"] = files.file.string();
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& group : files.inputs) {
    if (files.format == "csv")
      inputs.push_back(group);
    else
      inputs.push_back(group.front());
  }
  if (!files.inputs.empty())
    out["inputs"] = inputs;
  out["target"] = files.target;
  if (!files.lengths.empty())
    out["lengths"] = files.lengths;
  out["bucket_by_length"] = files.bucketByLength;
  out["shuffle"] = files.shuffle;
  out["drop_last"] = files.dropLast;
  out["workers"] = files.workers;
  out["validation_fraction"] = files.validationFraction;
  out["validate_every"] = files.validateEvery;
  return out;
}

nlohmann::json lossJson(const LossSpec& loss) {
  nlohmann::json out = {{"kind", loss.kind}};
  if (loss.classIndices())
    out["ignore_index"] = loss.ignoreIndex;
  if (loss.kind == "cross_entropy")
    out["label_smoothing"] = loss.labelSmoothing;
  if (loss.kind == "smooth_l1")
    out["beta"] = loss.beta;
  return out;
}

}  // namespace symtune::detail
