#include "symtune/exec/executor.h"

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <c10/util/StringUtil.h>

namespace symtune {

namespace {

// "a tuple of 3 values", "a dict with keys aux, logits", "a named tuple (logits, aux)".
std::string describeReturned(const c10::IValue& v) {
  if (v.isTuple()) {
    const auto names = v.toTupleRef().type()->names();
    const size_t n = v.toTupleRef().elements().size();
    if (names)
      return "a named tuple (" + c10::Join(", ", *names) + ")";
    return "a tuple of " + std::to_string(n) + " values";
  }
  if (v.isList())
    return "a list of " + std::to_string(v.toListRef().size()) + " values";
  if (v.isGenericDict()) {
    std::vector<std::string> keys;
    for (const auto& entry : v.toGenericDict())
      keys.push_back(entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind());
    return "a dict with keys " + c10::Join(", ", keys);
  }
  return v.isTensor() ? "a Tensor" : v.tagKind();
}

c10::IValue picked(const c10::IValue& returned, const OutputRef& ref) {
  const auto outside = [&] {
    TORCH_CHECK(false, "the model's forward returned ", describeReturned(returned),
                ": it has no output ", ref.text());
  };
  if (ref.index) {
    const auto i = static_cast<size_t>(*ref.index);
    if (returned.isTuple()) {
      const auto& elements = returned.toTupleRef().elements();
      if (i >= elements.size())
        outside();
      return elements[i];
    }
    if (returned.isList()) {
      const auto list = returned.toListRef();
      if (i >= list.size())
        outside();
      return list[i];
    }
    outside();
  }
  if (returned.isGenericDict()) {
    const c10::Dict<c10::IValue, c10::IValue> dict = returned.toGenericDict();
    for (const auto& entry : dict) {
      if (entry.key().isString() && entry.key().toStringRef() == ref.key)
        return entry.value();
    }
    outside();
  }
  if (returned.isTuple()) {
    if (const auto names = returned.toTupleRef().type()->names()) {
      for (size_t i = 0; i < names->size(); ++i) {
        if ((*names)[i] == ref.key)
          return returned.toTupleRef().elements()[i];
      }
    }
  }
  outside();
  return {};
}

}  // namespace

torch::Tensor forwardOutput(const c10::IValue& returned, const OutputRef& ref) {
  if (ref.empty()) {
    TORCH_CHECK(returned.isTensor(), "the model's forward returned ", describeReturned(returned),
                returned.isTuple() || returned.isList() || returned.isGenericDict()
                    ? "; name the one the loss reads in model.output"
                    : ", expected a Tensor");
    return returned.toTensor();
  }
  const c10::IValue out = picked(returned, ref);
  TORCH_CHECK(out.isTensor(), "the model's output ", ref.text(), " is ", describeReturned(out),
              ", expected a Tensor");
  return out.toTensor();
}

ScriptModuleExecutor::ScriptModuleExecutor(torch::jit::Module module, std::string graphName)
    : module_(std::move(module)), graphName_(std::move(graphName)) {
}

ScriptModuleExecutor::~ScriptModuleExecutor() = default;

ForwardResult ScriptModuleExecutor::run(const std::vector<torch::jit::IValue>& inputs,
                                        const ForwardRequest& request) {
  ForwardResult result;
  if (!request.measured()) {
    result.returned = module_.forward(inputs);
    result.output = forwardOutput(result.returned, output_);
    return result;
  }
  ForwardOptions options;
  options.record = request.record;
  EvaluatorRun run = symugen()->forward(inputs, options);
  result.returned = std::move(run.output);
  result.output = forwardOutput(result.returned, output_);
  result.owners = std::move(run.owners);
  result.branches = std::move(run.branches);
  return result;
}

SyMuGen* ScriptModuleExecutor::symugen() {
  if (!gen_)
    gen_ = std::make_unique<SyMuGen>(module_, graphName_);
  return gen_.get();
}

std::vector<torch::Tensor> ScriptModuleExecutor::parameters() {
  std::vector<torch::Tensor> params;
  for (const auto& [name, p] : namedParameters())
    params.push_back(p);
  return params;
}

// Note [Tied parameters once]
// A parameter shared by two modules (tied embedding and output weights) is listed by TorchScript's
// C++ named_parameters under each name; Python's lists it once, under the first. Listed twice, the
// optimizer stepped it twice a step (its update_ratio twice another weight's at one learning
// rate: it trained at double the rate) and the gradient statistics counted it twice. Once here,
// by its first name.
std::vector<std::pair<std::string, torch::Tensor>> ScriptModuleExecutor::namedParameters() {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : module_.named_parameters()) {
    if (seen.insert(p.value.unsafeGetTensorImpl()).second)
      params.emplace_back(p.name, p.value);
  }
  return params;
}

void ScriptModuleExecutor::setTraining(bool on) {
  module_.train(on);
}

void ScriptModuleExecutor::to(const torch::Device& device) {
  module_.to(device);
}

}  // namespace symtune
