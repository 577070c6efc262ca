#pragma once
// The one seam through which the trainer runs a model's forward (Note [The execution seam]).
//
//   symtune::ForwardRequest request;
//   request.attributeOps = true;                    // per-node telemetry on this step
//   symtune::ForwardResult fwd = executor.run(batch.inputs, request);
//   auto loss = torch::nn::functional::cross_entropy(fwd.output, batch.target);
//   loss.backward();                                // fwd.owners: which node made which function

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/script.h>

#include "symtune/core/session.h"
#include "symtune/graph/symugen.h"

namespace symtune {

// Note [The execution seam]
// Every forward the trainer runs — plain, per-node telemetry, captured, with segments recomputed
// — is one call of Executor::run. What the step wants measured travels with the call
// (ForwardRequest): that each op run inside its graph node's scope, so OpTracer attributes it
// (per-node telemetry), and that the step's graph be recorded (a capture). The executor decides
// how to honour it; the trainer never reaches around it to SyMuGen. How the model is executed
// belongs to the executor alone: ScriptModuleExecutor hands unmeasured steps to TorchScript's
// executor and measured ones to SyMuGen's evaluator, which ties each op to its node;
// SegmentExecutor always runs the evaluator, segment by segment (Note [Segments]), as its
// SegmentPlan says. The parts that decide how a step runs plug in there: the remat planner
// chooses the plan's recomputed segments under a memory budget, DynaCompiler's binder runs the op
// sites it binds (SegmentExecutor::setBinder; Note [Op sites]), and the meta-controller sets a
// plan between batches. Whatever the plan, measuring a step does not change how it runs: a
// sampled step recomputes the same segments and keeps no more alive than an unsampled one
// (tests/engine/exec/tst_executor.cpp checks both).

// What a step asks of its forward besides the output.
struct ForwardRequest {
  // Run each op inside its graph node's scope (node_context.h) and report which node created
  // which autograd functions: per-node telemetry.
  bool attributeOps = false;
  // Record the step into `*record` (SyMuGen ForwardOptions::record); the caller then joins the
  // loss's autograd graph with SyMuGen::joinBackward().
  Graph* record = nullptr;

  bool measured() const { return attributeOps || record != nullptr; }
};

struct ForwardResult {
  // The output the loss reads: what the forward returned, or the part of it the executor's
  // output reference names (Executor::setOutput) when it returns several.
  torch::Tensor output;
  c10::IValue returned;    // all the forward returned (auxiliary outputs, a loss method's input)
  SequenceOwners owners;   // with a measured request: which node created which function
  int64_t recomputed = 0;  // segment calls that kept no activations
  // The `if` branches that ran (region ids of SyMuGen's graph, in order): the batch's branch
  // pattern. nullopt from an executor that cannot see them (TorchScript's own).
  std::optional<std::vector<RegionId>> branches;
};

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs the model's forward on `inputs` as `request` asks.
  virtual ForwardResult run(const std::vector<torch::jit::IValue>& inputs,
                            const ForwardRequest& request) = 0;
  // run() with nothing measured.
  torch::Tensor forward(const std::vector<torch::jit::IValue>& inputs) {
    return run(inputs, {}).output;
  }
  virtual std::vector<torch::Tensor> parameters() = 0;
  // Parameters with their dotted names ("layer1.0.body.conv1.weight").
  virtual std::vector<std::pair<std::string, torch::Tensor>> namedParameters() = 0;
  virtual void setTraining(bool on) = 0;
  virtual void to(const torch::Device& device) = 0;
  // The TorchScript module it runs, if any (rewrite rules change it before the first step).
  virtual torch::jit::Module* scriptModule() { return nullptr; }
  // SyMuGen's graph of the model it runs, built on first use; null when the model has no IR (then
  // no step can be measured per node or captured).
  virtual SyMuGen* symugen() { return nullptr; }
  // A short name for reports: "torchscript", "segments", ...
  virtual const char* name() const = 0;

  // Which of the values the forward returns is ForwardResult::output, when it returns a tuple,
  // list, dict or named tuple (the session's model.output); empty: it returns a tensor.
  void setOutput(OutputRef ref) { output_ = std::move(ref); }
  const OutputRef& outputRef() const { return output_; }

 protected:
  OutputRef output_;
};

// A TorchScript module: TorchScript's default (profiling) executor when nothing is measured,
// SyMuGen's evaluator when the request asks for ops tied to nodes or a record.
class ScriptModuleExecutor final : public Executor {
 public:
  // `graphName`: the name SyMuGen's graph carries (the session's).
  explicit ScriptModuleExecutor(torch::jit::Module module, std::string graphName = {});
  ~ScriptModuleExecutor() override;

  ForwardResult run(const std::vector<torch::jit::IValue>& inputs,
                    const ForwardRequest& request) override;
  std::vector<torch::Tensor> parameters() override;
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override;
  void setTraining(bool on) override;
  void to(const torch::Device& device) override;
  torch::jit::Module* scriptModule() override { return &module_; }
  SyMuGen* symugen() override;
  const char* name() const override { return "torchscript"; }

  torch::jit::Module& module() { return module_; }

 private:
  torch::jit::Module module_;
  std::string graphName_;
  std::unique_ptr<SyMuGen> gen_;
};

// The tensor `ref` names in what the forward returned (the whole of it when `ref` is empty), or a
// c10::Error naming what the model returned instead: "the model's forward returned a tuple of 3
// values; name the one the loss reads in model.output", "... has no output \"aux\" (its keys:
// ...)".
torch::Tensor forwardOutput(const c10::IValue& returned, const OutputRef& ref = {});

}  // namespace symtune
