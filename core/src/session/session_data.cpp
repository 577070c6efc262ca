#include "session_data.h"

#include <set>

namespace symtune::detail {

std::filesystem::path sessionFolder(const std::filesystem::path& origin) {
  const std::filesystem::path dir = origin.parent_path();
  if (dir.empty())
    return dir;
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::weakly_canonical(dir, ec);
  return ec ? dir : real;
}

std::string writtenPath(const std::filesystem::path& path, const std::filesystem::path& folder) {
  if (folder.empty() || path.is_relative())
    return path.string();
  const std::filesystem::path inside = path.lexically_relative(folder);
  if (inside.empty() || *inside.begin() == "..")
    return path.string();
  return inside.string();
}

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
    p = sessionFolder(origin) / p;
  return p.lexically_normal();
}

// A position (a non-negative integer) or a key (a non-empty string).
OutputRef outputRef(const nlohmann::json& value, const std::string& field,
                    const FieldErrorFn& fail) {
  OutputRef ref;
  if (value.is_number_integer()) {
    const int64_t i = JsonFields::asInteger(value, field, fail);  // 2^64 - 1 is no -1
    if (i < 0)
      fail(field, "expected a position (0, 1, ...) or a key, found " + std::to_string(i));
    ref.index = i;
  } else if (value.is_string() && !value.get<std::string>().empty()) {
    ref.key = value.get<std::string>();
  } else {
    fail(field,
         "expected a position in the returned tuple or list (0, 1, ...) or a key of the "
         "returned dict or named tuple, found " +
             describeJsonType(value));
  }
  return ref;
}

// [n] or n, each a positive integer; 1 or 2 of them.
std::vector<int64_t> imageSize(const JsonFields& image, const char* key) {
  const nlohmann::json& value = image.require(key);
  std::vector<int64_t> out;
  const std::string field = image.fieldPath(key);
  if (value.is_array()) {
    if (value.empty() || value.size() > 2)
      image.fail(key, "expected [height, width] or one size, found an array of " +
                          std::to_string(value.size()));
    for (size_t i = 0; i < value.size(); ++i)
      out.push_back(
          JsonFields::asInteger(value[i], field + "[" + std::to_string(i) + "]", image.failFn()));
  } else {
    out.push_back(JsonFields::asInteger(value, field, image.failFn()));
  }
  for (int64_t v : out) {
    if (v <= 0 || v > 16384)
      image.fail(key, "expected sizes in [1, 16384], found " + std::to_string(v));
  }
  return out;
}

std::vector<double> perChannel(const JsonFields& image, const char* key, int channels) {
  const nlohmann::json& value = image.require(key);
  if (!value.is_array() || value.size() != static_cast<size_t>(channels))
    image.fail(key, "expected " + std::to_string(channels) + " numbers (one per channel), found " +
                        describeJsonType(value));
  std::vector<double> out;
  for (const auto& v : value) {
    if (!v.is_number())
      image.fail(key, "expected numbers, found " + describeJsonType(v));
    out.push_back(v.get<double>());
  }
  return out;
}

ImageSpec parseImageBlock(const JsonFields& image) {
  image.rejectUnknown({"channels", "resize", "crop", "mean", "std"});
  ImageSpec spec;
  const int64_t channels = image.integer("channels", 3);
  if (channels != 1 && channels != 3)
    image.fail("channels", "expected 1 (grey) or 3 (RGB), found " + std::to_string(channels));
  spec.channels = static_cast<int>(channels);
  if (image.has("resize"))
    spec.resize = imageSize(image, "resize");
  if (image.has("crop")) {
    spec.crop = imageSize(image, "crop");
    if (spec.crop.size() == 1)
      spec.crop.push_back(spec.crop[0]);
    if (spec.resize.size() == 2 && (spec.crop[0] > spec.resize[0] || spec.crop[1] > spec.resize[1]))
      image.fail("crop", "is larger than the resized image");
  }
  if (image.has("mean"))
    spec.mean = perChannel(image, "mean", spec.channels);
  if (image.has("std")) {
    spec.std = perChannel(image, "std", spec.channels);
    for (double s : spec.std) {
      if (!(s > 0))
        image.fail("std", "expected positive numbers");
    }
  }
  return spec;
}

}  // namespace

void parseModelOutputs(const JsonFields& fields, ModelSpec& model) {
  if (fields.has("output"))
    model.output = outputRef(fields.require("output"), fields.fieldPath("output"), fields.failFn());
  if (!fields.has("auxiliary_outputs"))
    return;
  const nlohmann::json& list = fields.require("auxiliary_outputs");
  if (!list.is_array())
    fields.fail(
        "auxiliary_outputs",
        "expected an array of {\"output\": ..., \"weight\": ...}, found " + describeJsonType(list));
  if (!list.empty() && model.output.empty())
    fields.fail("auxiliary_outputs",
                "needs model.output, the main output among those the forward returns");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = "auxiliary_outputs[" + std::to_string(i) + "]";
    if (!list[i].is_object())
      fields.fail(item, "expected an object, found " + describeJsonType(list[i]));
    const JsonFields aux(list[i], fields.fieldPath(item), fields.failFn());
    aux.rejectUnknown({"output", "weight"});
    AuxiliaryOutput out;
    out.output = outputRef(aux.require("output"), aux.fieldPath("output"), aux.failFn());
    out.weight = aux.number("weight", 1.0);
    if (!(out.weight > 0))
      aux.fail("weight", "expected a positive number");
    if (out.output.index == model.output.index && out.output.key == model.output.key)
      aux.fail("output", "is model.output, the main output");
    model.auxiliaryOutputs.push_back(std::move(out));
  }
}

nlohmann::json outputJson(const OutputRef& ref) {
  return ref.index ? nlohmann::json(*ref.index) : nlohmann::json(ref.key);
}

DataSpec parseDataBlock(const JsonFields& data, const std::filesystem::path& origin) {
  data.rejectUnknown({"seed", "batch_size", "format", "file", "inputs", "target", "lengths",
                      "shuffle", "drop_last", "workers", "validation_fraction", "validate_every",
                      "bucket_by_length", "image"});
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
          "validation_fraction", "validate_every", "bucket_by_length", "image"}) {
      if (data.has(key))
        data.fail(key,
                  "needs data.format (npy, npz, torch, csv, mnist, cifar10 or images): "
                  "without it "
                  "the data is synthetic");
    }
    return spec;
  }

  DataFilesSpec& files = spec.files;
  files.format = data.string("format");
  const std::set<std::string> formats = {"npy",   "npz",     "torch", "csv",
                                         "mnist", "cifar10", "images"};
  if (formats.count(files.format) == 0)
    data.fail("format", "expected one of npy, npz, torch, csv, mnist, cifar10, images, found " +
                            inQuotes(files.format));
  const bool npy = files.format == "npy", csv = files.format == "csv";
  // MNIST and CIFAR-10 hold two arrays, "images" and "labels": the input and the target unless
  // the session says otherwise.
  const bool images =
      files.format == "mnist" || files.format == "cifar10" || files.format == "images";
  if (data.has("image") && files.format != "images")
    data.fail("image", "applies to data.format \"images\" only");
  if (files.format == "images") {
    files.image = data.has("image") ? parseImageBlock(data.object("image")) : ImageSpec{};
    if (data.has("lengths"))
      data.fail("lengths", "images have no lengths");
  }
  if (files.format == "csv" && data.has("lengths"))
    data.fail("lengths",
              "CSV data has no sequences to cut: its inputs are rows of numbers of one width");
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
  loss.rejectUnknown({"kind", "ignore_index", "label_smoothing", "beta", "method"});
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
  if (loss.has("method")) {
    spec.method = loss.string("method");
    if (spec.method.empty() || spec.method == "forward")
      loss.fail("method", "expected the name of the model's loss method (not forward), found " +
                              inQuotes(spec.method));
  }
  return spec;
}

nlohmann::json dataJson(const DataSpec& data, const std::filesystem::path& folder) {
  nlohmann::json out = {{"seed", data.seed}};
  if (data.batchSize)
    out["batch_size"] = *data.batchSize;
  const DataFilesSpec& files = data.files;
  if (!files.enabled())
    return out;
  out["format"] = files.format;
  const bool npy = files.format == "npy";
  if (!npy)
    out["file"] = writtenPath(files.file, folder);
  // npy names are files; the other formats' are names inside the file.
  const auto name = [&](const std::string& n) { return npy ? writtenPath(n, folder) : n; };
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& group : files.inputs) {
    if (files.format == "csv")
      inputs.push_back(group);
    else
      inputs.push_back(name(group.front()));
  }
  if (!files.inputs.empty())
    out["inputs"] = inputs;
  out["target"] = name(files.target);
  if (!files.lengths.empty())
    out["lengths"] = name(files.lengths);
  out["bucket_by_length"] = files.bucketByLength;
  out["shuffle"] = files.shuffle;
  out["drop_last"] = files.dropLast;
  out["workers"] = files.workers;
  out["validation_fraction"] = files.validationFraction;
  out["validate_every"] = files.validateEvery;
  if (files.format == "images") {
    const ImageSpec& image = files.image;
    nlohmann::json block = {{"channels", image.channels}};
    if (!image.resize.empty())
      block["resize"] = image.resize;
    if (!image.crop.empty())
      block["crop"] = image.crop;
    if (!image.mean.empty())
      block["mean"] = image.mean;
    if (!image.std.empty())
      block["std"] = image.std;
    out["image"] = block;
  }
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
  if (!loss.method.empty())
    out["method"] = loss.method;
  return out;
}

}  // namespace symtune::detail
