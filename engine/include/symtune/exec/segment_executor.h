#pragma once
// Runs a TorchScript module through SyMuGen's evaluator one segment at a time, as a SegmentPlan
// says (Note [Segments], Note [The execution seam]). With every segment recomputed it is full
// activation checkpointing, the benchmark's "checkpoint" baseline; the remat planner picks a
// subset under a memory budget.
//
//   auto& module = *trainer.executor().scriptModule();
//   auto executor = std::make_unique<symtune::SegmentExecutor>(module);
//   executor->setPlan(executor->recomputeAll());
//   trainer.setExecutor(std::move(executor));

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/script.h>

#include "symtune/binding/binder.h"
#include "symtune/exec/executor.h"
#include "symtune/graph/symugen.h"

namespace symtune {

class SegmentExecutor final : public Executor {
 public:
  explicit SegmentExecutor(torch::jit::Module module, std::string graphName = {});

  ForwardResult run(const std::vector<torch::jit::IValue>& inputs,
                    const ForwardRequest& request) override;
  std::vector<torch::Tensor> parameters() override { return inner_.parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override {
    return inner_.namedParameters();
  }
  void setTraining(bool on) override { inner_.setTraining(on); }
  void to(const torch::Device& device) override { inner_.to(device); }
  torch::jit::Module* scriptModule() override { return inner_.scriptModule(); }
  SyMuGen* symugen() override { return &gen_; }
  const char* name() const override { return "segments"; }

  // The top-level blocks whose calls are the segments.
  std::vector<std::string> segments() const { return gen_.segmentBlocks(); }
  // From the next forward on. Throws c10::Error naming a block that is not a segment.
  void setPlan(SegmentPlan plan);
  const SegmentPlan& plan() const { return plan_; }
  // The plan that recomputes every segment: full activation checkpointing.
  SegmentPlan recomputeAll() const;
  // The plan that recomputes every run of ops without its closing op (Note [Runs without their
  // closing op]): selective recomputation of the cheap ops, the matmuls and convolutions kept.
  SegmentPlan recomputeCheapOps();
  // How many segment calls the last forward ran without keeping activations (a segment that
  // cannot be recomputed safely runs as usual: Note [Checkpointed spans]).
  int64_t lastRecomputed() const { return lastRecomputed_; }

  // DynaCompiler: the binder that runs the op sites it binds (Note [Op sites]), from the next
  // forward on; null: every op as the IR says. The executor shares it with whoever reads the
  // table. Recomputed top-level blocks, runs of ops and loops bind as in the forward (Note [Runs
  // recomputed bound] in symtune/binding/binder.h). A forward whose plan names a unit
  // refusedUnits() names runs every op as written (docs/remat.md, "With the binder").
  void setBinder(std::shared_ptr<binding::Binder> binder) {
    binder_ = std::move(binder);
    refusedFor_ = SIZE_MAX;
  }
  binding::Binder* binder() const { return binder_.get(); }
  // The binder shared: what a caller holds stays alive when the trainer puts another in its
  // place, or none, during a step (Note [A budget widens the slack] in symtune/binding/binder.h).
  const std::shared_ptr<binding::Binder>& sharedBinder() const { return binder_; }
  // The units a plan recomputes only by running the step unbound: the loops recomputed trip by
  // trip (SyMuGen::loopSpans()) and the runs of ops (SyMuGen::opRuns()) that hold part of a site
  // of several nodes, a node of a loop-carried rows group or of a matmul bias in a loop whose
  // projection may be batched across its trips, or an op the binder has not met yet. Empty
  // without a binder.
  const std::set<std::string>& refusedUnits();

 private:
  ScriptModuleExecutor inner_;
  SyMuGen gen_;
  SegmentPlan plan_;
  int64_t lastRecomputed_ = 0;
  std::shared_ptr<binding::Binder> binder_;
  std::set<std::string> refused_;
  size_t refusedFor_ = SIZE_MAX;  // the binder's nodesMet() refused_ was found at
};

}  // namespace symtune
