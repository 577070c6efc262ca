#include <array>
#include <filesystem>
#include <limits>
#include <ostream>

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <nlohmann/json.hpp>

#include "symtune/binding/binder.h"
#include "symtune/core/atomic_file.h"
#include "symtune/runtime/trainer.h"

// Checkpoints and resume (Note [Checkpoints]): one torch::serialize archive holding the model's
// tensors, the optimizer's state, the random generators and a JSON record of the rest.

namespace symtune {

namespace {

constexpr const char* kFormat = "symtune-checkpoint";
constexpr int kVersion = 1;

using TensorDict = c10::Dict<std::string, at::Tensor>;

// A file as a run knows it: its name and size, not where it lies (a run folder moved elsewhere
// resumes; another file of the same name does not).
std::string fileIdentity(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size =
      std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  return path.filename().string() +
         (ec || size == 0 ? "" : " (" + std::to_string(size) + " bytes)");
}

// What makes two runs the same run for a checkpoint: the model, its data (the files, and what
// decides which samples each step trains on and which are held out) and its optimizer with its
// hyper-parameters (LibTorch's load would put the checkpoint's over the session's unsaid).
nlohmann::json runIdentity(const Session& s) {
  nlohmann::json id = {
      // A model file by its name: its parameters are checked one by one, with clearer words.
      {"model", s.model.isZoo() ? s.model.zoo + " (" + s.model.preset + ")"
                                : s.model.file.filename().string()},
      {"data_seed", s.data.seed},
      {"batch_size", s.data.batchSize ? nlohmann::json(*s.data.batchSize) : nlohmann::json()},
      {"optimizer", s.optimizer.name},
      {"lr", s.optimizer.lr},
      {"weight_decay", s.optimizer.weightDecay},
      {"momentum", s.optimizer.momentum}};
  // Not optimizer.fused: the fused step keeps torch::optim's state in its archive, and its
  // default follows the device, so a run checkpointed on a GPU resumes on the CPU.
  const DataFilesSpec& f = s.data.files;
  if (f.enabled()) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const auto& group : f.inputs) {
      nlohmann::json names = nlohmann::json::array();
      for (const auto& name : group)
        names.push_back(f.format == "npy" ? fileIdentity(name) : name);
      inputs.push_back(std::move(names));
    }
    const auto named = [&](const std::string& name) {
      return f.format == "npy" && !name.empty() ? fileIdentity(name) : name;
    };
    id["data"] = {{"format", f.format},
                  {"file", f.file.empty() ? "" : fileIdentity(f.file)},
                  {"inputs", std::move(inputs)},
                  {"target", named(f.target)},
                  {"lengths", named(f.lengths)},
                  {"bucket_by_length", f.bucketByLength},
                  {"shuffle", f.shuffle},
                  {"drop_last", f.dropLast},
                  {"validation_fraction", f.validationFraction}};
  } else {
    // Said, not left out: only this session's keys are compared, and a checkpoint of a run on
    // data files resumed on synthetic data (until 2026-12-07). A checkpoint without the key
    // (written on synthetic data) reads it as null.
    id["data"] = nullptr;
  }
  return id;
}

nlohmann::json configurationJson(const control::Configuration& c) {
  nlohmann::json out = {{"microbatches", c.microbatches}, {"threads", c.threads}};
  out["remat_budget"] = c.rematBudget ? nlohmann::json(*c.rematBudget) : nlohmann::json(nullptr);
  out["binding_explore"] =
      c.bindingExplore ? nlohmann::json(*c.bindingExplore) : nlohmann::json(nullptr);
  return out;
}

control::Configuration configurationFrom(const nlohmann::json& in) {
  control::Configuration c;
  c.microbatches = in.at("microbatches").get<int>();
  c.threads = in.at("threads").get<int>();
  if (in.at("remat_budget").is_number())
    c.rematBudget = in.at("remat_budget").get<double>();
  if (in.at("binding_explore").is_boolean())
    c.bindingExplore = in.at("binding_explore").get<bool>();
  return c;
}

// The CPU's generator and each CUDA device's, by device name ("cpu", "cuda:0").
TensorDict generatorStates() {
  TensorDict states;
  states.insert("cpu", at::detail::getDefaultCPUGenerator().get_state());
  const auto devices = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < devices; ++i) {
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(i));
    states.insert(device.str(), at::globalContext().defaultGenerator(device).get_state());
  }
  return states;
}

void restoreGenerators(const TensorDict& states) {
  for (const auto& entry : states) {
    const at::Device device(entry.key());
    if (device.is_cuda() && device.index() >= static_cast<int>(torch::cuda::device_count()))
      continue;  // a device this machine lacks: nothing runs on it
    at::Generator generator = device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                                              : at::globalContext().defaultGenerator(device);
    generator.set_state(entry.value().cpu());
  }
}

}  // namespace

void Trainer::saveCheckpoint(const std::filesystem::path& path, const std::string& report) {
  torch::jit::Module* module = executor_->scriptModule();
  TORCH_CHECK(module != nullptr, "the model has no TorchScript module to checkpoint");
  torch::serialize::OutputArchive archive;
  nlohmann::json record = {{"format", kFormat},
                           {"version", kVersion},
                           {"steps", stepsDone()},
                           {"run", runIdentity(session_)},
                           {"configuration", configurationJson(configuration())},
                           {"report", report}};
  if (const binding::Binder* b = binder())
    record["bindings"] = b->table().toJson();
  if (controller_)
    record["controller"] = controller_->state();
  {
    const MetaInfoBroker::Resumable b = broker_->resumable();
    nlohmann::json last;  // null: no step yet; a NaN feature is written as null
    if (b.last)
      last = std::vector<double>(b.last->values.begin(), b.last->values.end());
    record["features"] = {{"step", b.step}, {"loss_ema", b.lossEma}, {"last", last}};
  }
  if (remat_) {
    const remat::Rematerializer::Measurements m = remat_->measurements();
    record["remat"] = {{"plain_steps", m.plainSteps},
                       {"plain_peak", m.plainPeak},
                       {"budgeted_seen", m.budgetedSeen},
                       {"steps", m.steps}};
  }
  archive.write("record", c10::IValue(record.dump()));
  TensorDict parameters, buffers;
  for (const auto& p : module->named_parameters())
    parameters.insert(p.name, p.value.detach());
  for (const auto& b : module->named_buffers())
    buffers.insert(b.name, b.value);
  archive.write("parameters", c10::IValue(parameters));
  archive.write("buffers", c10::IValue(buffers));
  archive.write("generators", c10::IValue(generatorStates()));
  torch::serialize::OutputArchive optimizer;
  optimizer_->inner().save(optimizer);
  archive.write("optimizer", optimizer);

  try {
    writeFileAtomically(path, [&](std::ostream& out) { archive.save_to(out); });
  } catch (const c10::Error& e) {
    throw std::runtime_error(path.string() + ": cannot write the checkpoint: " + oneLine(e));
  }
}

Trainer::Resumed Trainer::resume(const std::filesystem::path& path) {
  const std::string file = path.string();
  if (!std::filesystem::is_regular_file(path))
    throw SetupError(file + ": no checkpoint to resume from");
  TORCH_CHECK(stepsDone() == 0, "Trainer::resume: the run has taken steps already");
  torch::serialize::InputArchive archive;
  nlohmann::json record;
  TensorDict parameters, buffers, generators;
  try {
    archive.load_from(file, device_);
    c10::IValue value;
    archive.read("record", value);
    record = nlohmann::json::parse(value.toStringRef());
    archive.read("parameters", value);
    parameters = c10::impl::toTypedDict<std::string, at::Tensor>(value.toGenericDict());
    archive.read("buffers", value);
    buffers = c10::impl::toTypedDict<std::string, at::Tensor>(value.toGenericDict());
    archive.read("generators", value);
    generators = c10::impl::toTypedDict<std::string, at::Tensor>(value.toGenericDict());
  } catch (const c10::Error& e) {
    throw SetupError(file + ": not a readable checkpoint: " + oneLine(e));
  } catch (const nlohmann::json::exception& e) {
    throw SetupError(file + ": not a readable checkpoint: " + e.what());
  }
  if (record.value("format", "") != kFormat || record.value("version", 0) != kVersion)
    throw SetupError(file + ": not a " + kFormat + " of version " + std::to_string(kVersion));
  const nlohmann::json mine = runIdentity(session_);
  for (const auto& [key, value] : mine.items()) {
    const nlohmann::json theirs = record["run"].value(key, nlohmann::json());
    if (theirs == value)
      continue;
    std::string what = key;  // the first field of a data block that differs
    nlohmann::json a = theirs, b = value;
    if (theirs.is_object() && value.is_object()) {
      for (const auto& [field, v] : value.items()) {
        if (theirs.value(field, nlohmann::json()) != v) {
          what = key + "." + field;
          a = theirs.value(field, nlohmann::json());
          b = v;
          break;
        }
      }
    }
    throw SetupError(file + ": a checkpoint of another run: its " + what + " is " + a.dump() +
                     ", this session's " + b.dump());
  }

  Resumed resumed;
  resumed.steps = record.at("steps").get<int64_t>();
  resumed.report = record.value("report", "");
  torch::jit::Module* module = executor_->scriptModule();
  {
    torch::NoGradGuard noGrad;
    const auto restore = [&](const TensorDict& saved, const std::string& name, at::Tensor t,
                             const char* what) {
      const auto it = saved.find(name);
      if (it == saved.end() || it->value().sizes() != t.sizes())
        throw SetupError(file + ": a checkpoint of another model: its " + what + " " + name +
                         (it == saved.end() ? " is missing" : " has another shape"));
      t.copy_(it->value());
    };
    size_t count = 0;
    for (const auto& p : module->named_parameters()) {
      restore(parameters, p.name, p.value, "parameter");
      ++count;
    }
    if (count != parameters.size())
      throw SetupError(file + ": a checkpoint of another model: it holds " +
                       std::to_string(parameters.size()) + " parameters, the model " +
                       std::to_string(count));
    for (const auto& b : module->named_buffers())
      restore(buffers, b.name, b.value, "buffer");
  }
  try {
    torch::serialize::InputArchive optimizer;
    archive.read("optimizer", optimizer);
    optimizer_->inner().load(optimizer);
  } catch (const c10::Error& e) {
    throw SetupError(file + ": the optimizer's state cannot be restored: " + oneLine(e));
  }
  optimizer_->resumeAt(resumed.steps);
  restoreGenerators(generators);
  {
    // What rules read goes on from where it was (a checkpoint without it: the step count).
    MetaInfoBroker::Resumable b;
    b.step = resumed.steps;
    if (const auto f = record.find("features"); f != record.end() && f->is_object()) {
      b.step = f->value("step", resumed.steps);
      // Null where it was not finite (a loss gone NaN): NaN again, as it was.
      const nlohmann::json ema = f->value("loss_ema", nlohmann::json());
      b.lossEma = ema.is_number() ? ema.get<double>() : std::numeric_limits<double>::quiet_NaN();
      const nlohmann::json& last = (*f)["last"];
      constexpr auto count = static_cast<size_t>(kFeatureCount);
      if (last.is_array() && last.size() == count) {
        StepFeatures features;
        for (size_t i = 0; i < count; ++i)
          features.values[i] = last[i].is_number() ? last[i].get<double>()
                                                   : std::numeric_limits<double>::quiet_NaN();
        b.last = features;
      }
    }
    broker_->resume(b);
  }
  try {
    const control::Configuration c = configurationFrom(record.at("configuration"));
    // A count the run split to (3, 6, 12: Note [Splitting further]) is the run's, and in its
    // space as such; until 2026-12-07 it was outside a fresh one, the whole configuration went,
    // and the resumed run split its way there again, each overrun again.
    const int before = microbatches_;
    microbatches_ = c.microbatches;
    try {
      if (auto why = configSpace().outside(c))  // configure() checks only a change
        throw SetupError(*why);
      configure(c);
    } catch (...) {
      microbatches_ = before;
      throw;
    }
  } catch (const SetupError& e) {
    resumed.notes.push_back(std::string("the checkpoint's configuration is not used: ") + e.what());
  }
  if (binding::Binder* b = binder(); b != nullptr && record.contains("bindings")) {
    try {
      if (auto why = b->adopt(
              BindingTable::fromJson(record["bindings"].get<std::string>(), file + " (bindings)")))
        resumed.notes.push_back("the checkpoint's bindings are not used: " + *why);
    } catch (const std::exception& e) {
      resumed.notes.push_back(std::string("the checkpoint's bindings are not used: ") + e.what());
    }
  }
  if (controller_ && record.contains("controller")) {
    try {
      controller_->restore(record["controller"].get<std::string>());
    } catch (const std::exception& e) {
      resumed.notes.push_back(std::string("the online controller starts learning again: ") +
                              e.what());
    }
  }
  if (remat_ && record.contains("remat")) {
    try {
      const nlohmann::json& r = record["remat"];
      remat::Rematerializer::Measurements m;
      m.plainSteps = r.at("plain_steps").get<int64_t>();
      m.plainPeak = r.at("plain_peak").get<double>();
      m.budgetedSeen = r.at("budgeted_seen").get<bool>();
      m.steps = r.at("steps").get<std::vector<std::array<double, 3>>>();
      remat_->restore(m);
    } catch (const std::exception& e) {
      resumed.notes.push_back(std::string("the remat budget is measured again: ") + e.what());
    }
  }
  return resumed;
}

}  // namespace symtune
