#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "symtune/data/file_source.h"
#include "symtune/runtime/loss.h"
#include "symtune/runtime/trainer.h"

// The trainer's data for a user's model file: the files the session names or synthetic data, the
// model checked against it before training, and validation on the held-out samples.

namespace symtune {

namespace {

std::string shapeText(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// Whether the data's batch fits the session's model.inputs (given beside data files): the count,
// each dtype and each sample's shape, a sequence's length aside. "" or the problem.
std::string inputSpecMismatch(const std::vector<InputSpec>& specs, const Batch& batch,
                              bool sequences) {
  if (specs.size() != batch.inputs.size())
    return "model.inputs lists " + std::to_string(specs.size()) + " inputs, the data gives " +
           std::to_string(batch.inputs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const torch::Tensor& t = batch.inputs[i].toTensor();
    const torch::ScalarType want = specs[i].dtype == DType::Int64     ? torch::kLong
                                   : specs[i].dtype == DType::Float64 ? torch::kDouble
                                                                      : torch::kFloat;
    bool fits = t.scalar_type() == want && t.dim() == static_cast<int64_t>(specs[i].shape.size());
    for (int64_t d = 1; fits && d < t.dim(); ++d)
      fits = t.size(d) == specs[i].shape[static_cast<size_t>(d)] || (sequences && d == 1);
    if (!fits) {
      std::vector<int64_t> shape = specs[i].shape;
      std::ostringstream spec;
      spec << c10::IntArrayRef(shape) << " " << toString(specs[i].dtype);
      return "model.inputs[" + std::to_string(i) + "] is " + spec.str() + ", the data's input " +
             std::to_string(i) + " " + shapeText(t) + " " + c10::toString(t.scalar_type());
    }
  }
  return "";
}

}  // namespace

void Trainer::setUpFileData() {
  const int64_t batch = session_.data.batchSize.value_or(
      session_.model.inputs.empty() ? 0 : session_.model.inputs[0].shape[0]);
  if (!session_.data.files.enabled()) {
    data_ = std::make_unique<ProjectionLabelled>(session_.model.inputs, session_.model.classes,
                                                 batch, session_.data.seed);
    return;
  }
  std::unique_ptr<FileDataSource> files;
  try {
    files = std::make_unique<FileDataSource>(session_.data, session_.loss, session_.model.classes,
                                             batch);
  } catch (const DataError& e) {
    throw SetupError(e.what());
  } catch (const c10::Error& e) {
    throw SetupError("data: " + oneLine(e));
  }
  dataDescription_ = files->description();
  validationBatches_ = files->validationBatches();
  data_ = std::move(files);
}

void Trainer::checkModelOnData() {
  // Check the user's model against its data and loss once, before training, so a mismatch is
  // a setup error with both shapes in it rather than a failure at step 0.
  torch::NoGradGuard noGrad;
  executor_->setTraining(false);
  Batch probe = data_->batch(0);
  const bool files = session_.data.files.enabled();
  if (files && !session_.model.inputs.empty()) {
    const std::string mismatch =
        inputSpecMismatch(session_.model.inputs, probe, !session_.data.files.lengths.empty());
    if (!mismatch.empty())
      throw SetupError(description_ + ": " + mismatch);
  }
  inputsTo(probe.inputs, device_, false);
  const std::string inputsFrom = files ? "the data's inputs" : "inputs of model.inputs";
  torch::Tensor out;
  try {
    out = executor_->forward(probe.inputs);
  } catch (const c10::Error& e) {
    throw SetupError(description_ + ": forward failed on " + inputsFrom + ": " + oneLine(e));
  } catch (const std::exception& e) {  // the TorchScript interpreter's errors
    throw SetupError(description_ + ": forward failed on " + inputsFrom + ": " + oneLine(e));
  }
  const int64_t classes = session_.model.classes;
  const bool perPosition = probe.target.dim() >= 2 && session_.loss.classIndices();
  if (out.dim() < 2 || out.size(0) != probe.size || out.size(-1) != classes ||
      (perPosition && out.dim() != 3)) {
    const std::string b = std::to_string(probe.size), c = std::to_string(classes);
    throw SetupError(description_ + ": forward returned shape " + shapeText(out) + ", expected " +
                     (perPosition ? "[" + b + ", positions, " + c + "] (batch, positions, "
                                  : "[" + b + ", " + c + "] (batch, ") +
                     "model.classes)");
  }
  if (!out.is_floating_point()) {
    throw SetupError(description_ + ": forward returned " + std::string(out.dtype().name()) + " " +
                     (session_.loss.classIndices() ? "logits" : "values") +
                     ", expected floating point");
  }
  try {
    trainingLoss(session_.loss, out.to(torch::kFloat), probe.target.to(device_));
  } catch (const std::invalid_argument& e) {
    throw SetupError(description_ + ": " + e.what());
  }
}

std::optional<Validation> Trainer::validate() {
  if (validationBatches_.empty())
    return std::nullopt;
  torch::NoGradGuard noGrad;
  executor_->setTraining(false);
  Validation v;
  v.step = stepsDone();
  double lossSum = 0;
  int64_t counted = 0, top1 = 0, top5 = 0;
  const bool classes = session_.loss.classIndices();
  const int64_t width = session_.model.classes;
  for (Batch b : validationBatches_) {
    inputsTo(b.inputs, device_, false);
    const torch::Tensor target = b.target.to(device_);
    const torch::Tensor out = executor_->forward(b.inputs).to(torch::kFloat);
    const int64_t n = countedTargets(session_.loss, target);
    if (n == 0)
      continue;
    lossSum += trainingLoss(session_.loss, out, target).item<double>() * static_cast<double>(n);
    counted += n;
    v.samples += b.size;
    if (classes) {
      const torch::Tensor scores = out.reshape({-1, width}), t = target.reshape({-1});
      const torch::Tensor counts = t.ne(session_.loss.ignoreIndex);
      top1 += scores.argmax(1).eq(t).logical_and(counts).sum().item<int64_t>();
      if (width > 5)
        top5 += std::get<1>(scores.topk(5, 1))
                    .eq(t.unsqueeze(1))
                    .any(1)
                    .logical_and(counts)
                    .sum()
                    .item<int64_t>();
    }
  }
  executor_->setTraining(true);
  if (counted == 0)
    return std::nullopt;
  v.loss = lossSum / static_cast<double>(counted);
  if (classes) {
    v.top1 = static_cast<double>(top1) / static_cast<double>(counted);
    if (width > 5)
      v.top5 = static_cast<double>(top5) / static_cast<double>(counted);
  }
  return v;
}

void Trainer::saveModel(const std::filesystem::path& path) {
  const torch::jit::Module* module = executor_->scriptModule();
  if (module == nullptr)
    throw std::runtime_error(path.string() + ": the model has no TorchScript module to save");
  const std::string temporary = path.string() + ".saving";
  try {
    torch::jit::Module copy = module->deepcopy(torch::Device(torch::kCPU));
    copy.eval();
    copy.save(temporary);
  } catch (const c10::Error& e) {
    std::remove(temporary.c_str());
    throw std::runtime_error(path.string() + ": cannot save the model: " + oneLine(e));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    throw std::runtime_error(path.string() + ": cannot save the model: " + why);
  }
}

}  // namespace symtune
