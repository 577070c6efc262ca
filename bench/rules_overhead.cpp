// What a rule costs against the same transform written by hand in ATen: the built-in
// gradient_steering rule (clamp every gradient element to the gradient's RMS) over every parameter
// of a zoo model, applied to real gradients from one backward. Both sides run on copies of the
// same gradients, in turn, many times; the JSON gives the median time of each and their ratio.
//
//   build/ci/bin/symtune-bench-rules [--preset cpu] [--model dynamic_resnet] [--runs 200]

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/runtime/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Params = std::vector<std::pair<std::string, torch::Tensor>>;

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A parameter list whose gradients are fresh copies of `grads` (both sides start from the same).
void reset(Params& params, const std::vector<torch::Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i)
    params[i].second.mutable_grad().copy_(grads[i]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "cpu", model = "dynamic_resnet";
  int runs = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--preset")
      preset = argv[i + 1];
    else if (arg == "--model")
      model = argv[i + 1];
    else if (arg == "--runs")
      runs =
          static_cast<int>(symtune::bench::wholeNumberArg("symtune-bench-rules", arg, argv[i + 1]));
    else {
      std::cerr << "usage: symtune-bench-rules [--preset P] [--model M] [--runs N]\n";
      return 2;
    }
  }
  symtune::Session session;
  session.name = "rules overhead";
  session.model.zoo = model;
  session.model.preset = preset;
  session.run.device = "auto";
  symtune::Trainer trainer(session);
  trainer.step();  // leaves each parameter's gradient of that step in place
  Params params;
  std::vector<torch::Tensor> grads;
  for (auto& [name, p] : trainer.executor().namedParameters()) {
    if (!p.grad().defined())
      continue;
    params.emplace_back(name, p);
    grads.push_back(p.grad().clone());
  }
  symtune::rules::RuleSet rules;
  rules.add(symtune::rules::parseRules(R"(rule gradient_steering {
    select params "*"
    let t = sqrt(mean(grad^2))
    set grad = clamp(grad, -t, t)
  })"));
  const symtune::StepFeatures features;
  auto byHand = [&] {
    torch::NoGradGuard noGrad;
    for (auto& [name, p] : params) {
      torch::Tensor g = p.mutable_grad();
      const torch::Tensor t = g.square().mean().sqrt();
      g.clamp_(-t, t);
    }
  };
  auto byRule = [&] { rules.apply(params, features, 1e-3); };

  // Same result first: the rule must do what the hand-written code does.
  reset(params, grads);
  byHand();
  std::vector<torch::Tensor> expected;
  for (auto& [name, p] : params)
    expected.push_back(p.grad().clone());
  reset(params, grads);
  byRule();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!torch::allclose(params[i].second.grad(), expected[i])) {
      std::cerr << "the rule and the hand-written transform differ on " << params[i].first << "\n";
      return 1;
    }
  }

  // On a GPU the work is queued: each timing waits for what it queued, and starts with the copies
  // of reset() done. The two alternate which goes first (what runs before a timing moves it).
  const bool cuda = trainer.device().is_cuda();
  auto timed = [&](const auto& transform) {
    reset(params, grads);
    if (cuda)
      torch::cuda::synchronize();
    const auto t0 = Clock::now();
    transform();
    if (cuda)
      torch::cuda::synchronize();
    return seconds(t0);
  };
  std::vector<double> hand, rule, ratio;
  for (int r = 0; r < runs + 5; ++r) {
    double h = 0, u = 0;
    if (r % 2 == 0) {
      h = timed(byHand);
      u = timed(byRule);
    } else {
      u = timed(byRule);
      h = timed(byHand);
    }
    if (r < 5)
      continue;  // warm-up
    hand.push_back(h);
    rule.push_back(u);
    ratio.push_back(u / h);
  }
  int64_t elements = 0;
  for (const auto& g : grads)
    elements += g.numel();
  using symtune::bench::median;
  const nlohmann::ordered_json out{
      {"benchmark", "rules_overhead"},
      {"cpu", symtune::bench::cpuModel()},
      {"threads", at::get_num_threads()},
      {"device", trainer.device().str()},
      {"model", trainer.modelDescription()},
      {"parameters", params.size()},
      {"elements", elements},
      {"runs", runs},
      {"hand_written_s", median(hand)},
      {"rule_s", median(rule)},
      {"ratio_median_per_run", median(ratio)},
  };
  std::cout << out.dump(2) << "\n";
  return 0;
}
