#pragma once
// What the engine.remat.rematerializer test cases share: two intra-op threads, the zoo models
// on their ci preset, a session of one under a budget, and the plain run a plan must train like.

#include <memory>
#include <optional>
#include <string>

#include <ATen/Parallel.h>

#include "symtune/exec/segment_executor.h"
#include "symtune/runtime/trainer.h"

namespace symtune::test::remat {

struct TwoThreads {
  TwoThreads() { at::set_num_threads(2); }
};

inline const char* const kModels[] = {"dynamic_resnet", "transformer_xl", "dynamic_tagger",
                                      "moe_topk",       "early_exit",     "tree_rnn"};

inline symtune::Session sessionFor(const std::string& model) {
  symtune::Session s;
  s.name = model;
  s.model.zoo = model;
  s.model.preset = "ci";
  s.data.seed = 5;
  s.binding.enabled = false;
  return s;
}

inline symtune::Session underBudget(const std::string& model, std::optional<double> fraction,
                                    std::optional<double> megabytes = std::nullopt) {
  symtune::Session s = sessionFor(model);
  s.remat.enabled = true;
  s.remat.budgetFraction = fraction;
  s.remat.budgetMb = megabytes;
  return s;
}

// The model run op by op through the evaluator, nothing recomputed: what a plan must train like.
inline std::unique_ptr<symtune::Trainer> plainTrainer(const std::string& model) {
  auto t = std::make_unique<symtune::Trainer>(sessionFor(model));
  t->setExecutor(std::make_unique<symtune::SegmentExecutor>(*t->executor().scriptModule()));
  return t;
}

}  // namespace symtune::test::remat
