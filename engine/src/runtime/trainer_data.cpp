#include <ostream>
#include <sstream>

#include <c10/util/StringUtil.h>

#include "symtune/binding/binder.h"
#include "symtune/core/atomic_file.h"
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

// An error of the model's output reference (forwardOutput) rather than of its forward.
bool aboutOutputs(const std::string& message) {
  return message.rfind("the model's forward returned", 0) == 0 ||
         message.rfind("the model's output", 0) == 0;
}

}  // namespace

torch::Tensor Trainer::sessionLoss(const ForwardResult& forward, const torch::Tensor& target,
                                   binding::Binder* binder, bool auxiliary) {
  const LossSpec& spec = session_.loss;
  if (!spec.method.empty()) {
    const c10::IValue value =
        executor_->scriptModule()->get_method(spec.method)({forward.returned, target});
    TORCH_CHECK(
        value.isTensor() && value.toTensor().numel() == 1 && value.toTensor().is_floating_point(),
        "the model's ", spec.method, " method returned ", value.tagKind(),
        ", expected one floating-point value");
    return value.toTensor().reshape({}).to(torch::kFloat);
  }
  // With binding on, the main loss is a site of its own (ATen's or kernels' fused cross-entropy):
  // PyTorch's plain cross-entropy of [N, C] logits. Other losses, shapes and options are the
  // session's loss as written.
  const torch::Tensor scores = forward.output.to(torch::kFloat);
  const bool bindable = spec.isPlainCrossEntropy() && scores.dim() == 2 && target.dim() == 1;
  torch::Tensor loss = binder != nullptr && bindable ? binder->loss(scores, target)
                                                     : trainingLoss(spec, scores, target);
  if (auxiliary) {
    for (const AuxiliaryOutput& aux : session_.model.auxiliaryOutputs) {
      const torch::Tensor out = forwardOutput(forward.returned, aux.output).to(torch::kFloat);
      loss = loss + aux.weight * trainingLoss(spec, out, target);
    }
  }
  return loss;
}

void Trainer::setUpFileData() {
  const int64_t batch = session_.data.batchSize.value_or(
      session_.model.inputs.empty() ? 0 : session_.model.inputs[0].shape[0]);
  if (!session_.data.files.enabled()) {
    if (session_.model.classes < 2)
      throw SetupError(
          "model.classes: the synthetic data (a session without data.format) draws "
          "class labels, so it needs 2 classes or more, found " +
          std::to_string(session_.model.classes) + "; for other targets, give data files");
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
  } catch (const std::bad_alloc&) {
    throw SetupError("data: the data files need more memory than this machine has");
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
  ForwardResult forward;
  try {
    forward = executor_->run(probe.inputs, {});
  } catch (const std::exception& e) {  // c10::Error, and the TorchScript interpreter's errors
    const std::string why = oneLine(e);
    throw SetupError(description_ + ": " +
                     (aboutOutputs(why) ? why : "forward failed on " + inputsFrom + ": " + why));
  }
  const torch::Tensor target = probe.target.to(device_);
  const LossSpec& loss = session_.loss;
  if (!loss.method.empty()) {
    torch::jit::Module* module = executor_->scriptModule();
    if (module == nullptr || !module->find_method(loss.method)) {
      std::vector<std::string> names;
      if (module != nullptr) {
        for (const auto& m : module->get_methods())
          names.push_back(m.name());
      }
      throw SetupError(description_ + ": loss.method: the model has no method \"" + loss.method +
                       "\" (its methods: " + c10::Join(", ", names) + ")");
    }
    try {
      sessionLoss(forward, target, nullptr, false);
    } catch (const std::exception& e) {
      throw SetupError(description_ + ": loss.method " + loss.method + ": " + oneLine(e));
    }
    return;  // the method pairs the output with the target as it likes
  }
  // Auxiliary outputs in eval mode may be None (a network's auxiliary classifiers often are):
  // those present are checked, the others at the first step.
  for (const AuxiliaryOutput& aux : session_.model.auxiliaryOutputs) {
    try {
      const torch::Tensor a = forwardOutput(forward.returned, aux.output);
      trainingLoss(loss, a.to(torch::kFloat), target);
    } catch (const std::invalid_argument& e) {
      throw SetupError(description_ + ": auxiliary output " + aux.output.text() + ": " + e.what());
    } catch (const c10::Error& e) {
      const std::string why = oneLine(e);
      if (why.find("is None") == std::string::npos)
        throw SetupError(description_ + ": " + why);
    }
  }
  const torch::Tensor out = forward.output;
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
    trainingLoss(session_.loss, out.to(torch::kFloat), target);
  } catch (const std::invalid_argument& e) {
    throw SetupError(description_ + ": " + e.what());
  }
}

void Trainer::checkFirstBatch() {
  if (!session_.model.isZoo())
    return;  // checkModelOnData ran when the trainer was built
  torch::NoGradGuard noGrad;
  executor_->setTraining(false);
  try {
    Batch probe = data_->batch(0);
    inputsTo(probe.inputs, device_, false);
    // The module itself where there is one: the binder would measure candidates here.
    if (torch::jit::Module* module = executor_->scriptModule())
      module->forward(probe.inputs);
    else
      executor_->run(probe.inputs, {});
  } catch (const std::exception& e) {  // c10::Error: out of memory, a device's failure
    executor_->setTraining(true);
    throw SetupError(description_ + ": the first batch: " + oneLine(e));
  }
  executor_->setTraining(true);
}

std::optional<Validation> Trainer::validate() {
  if (validationBatches_.empty())
    return std::nullopt;
  torch::NoGradGuard noGrad;
  executor_->setTraining(false);
  // Training again however this function leaves, a throw included.
  struct Training {
    Executor& executor;
    ~Training() { executor.setTraining(true); }
  } training{*executor_};
  Validation v;
  v.step = stepsDone();
  double lossSum = 0;
  int64_t counted = 0, top1 = 0, top5 = 0;
  bool scored = false;
  const bool classes = session_.loss.classIndices();
  const int64_t width = session_.model.classes;
  for (Batch b : validationBatches_) {
    inputsTo(b.inputs, device_, false);
    const torch::Tensor target = b.target.to(device_);
    const ForwardResult forward = executor_->run(b.inputs, {});
    const torch::Tensor out = forward.output.to(torch::kFloat);
    const int64_t n = countedTargets(session_.loss, target);
    if (n == 0)
      continue;
    lossSum += sessionLoss(forward, target, nullptr, false).item<double>() * static_cast<double>(n);
    counted += n;
    v.samples += b.size;
    // Scored when the main output holds a row of class scores per target entry (under a loss
    // method it need not).
    if (classes && out.size(-1) == width && out.numel() == target.numel() * width) {
      scored = true;
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
  if (counted == 0)
    return std::nullopt;
  v.loss = lossSum / static_cast<double>(counted);
  if (classes && scored) {
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
  try {
    torch::jit::Module copy = module->deepcopy(torch::Device(torch::kCPU));
    copy.eval();
    writeFileAtomically(path, [&](std::ostream& out) { copy.save(out); });
  } catch (const c10::Error& e) {
    throw std::runtime_error(path.string() + ": cannot save the model: " + oneLine(e));
  }
}

}  // namespace symtune
