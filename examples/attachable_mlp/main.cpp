// An ordinary LibTorch training program, made attachable (docs/protocol.md, "Embedding"): a plain
// torch::nn MLP learns to classify points of four Gaussian clusters, with Adam wrapped in
// symtune::MetaOptimizer and each step run through symtune::attach::AttachedLoop. Attach to it
// like to symtune-runner: the studio, or any attach client, sees every step's features and the
// rules, and can toggle or add rules, pause, resume and stop it.
//
//   symtune-example-attachable ENDPOINT [STEPS [LINGER]]     e.g.  unix:/tmp/mlp.sock 100000
//
// Paused by a client that then goes away, it stops after LINGER seconds (default 60) with no
// client attached; Ctrl-C stops it too, paused or not.
//
// Everything below the model and data is the usual loop; the Symtune part is four lines.

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "symtune/attach/attached_loop.h"
#include "symtune/rules/rule_registry.h"

namespace {

symtune::attach::AttachedLoop* running = nullptr;  // what Ctrl-C stops
volatile std::sig_atomic_t interrupted = 0;

extern "C" void stopOnInterrupt(int) {
  interrupted = 1;
  if (running != nullptr)
    running->requestStop();
}

// Four clusters in 8 dimensions; the label is the cluster.
std::pair<torch::Tensor, torch::Tensor> batch(const torch::Tensor& centres, int64_t size) {
  const auto labels = torch::randint(0, centres.size(0), {size}, torch::kLong);
  const auto points = centres.index_select(0, labels) + 0.7 * torch::randn({size, centres.size(1)});
  return {points, labels};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: symtune-example-attachable ENDPOINT [STEPS [LINGER]]\n";
    return 2;
  }
  const std::string endpoint = argv[1];
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 1000;
  const double linger = argc > 3 ? std::atof(argv[3]) : 60;
  torch::manual_seed(0);
  at::set_num_threads(1);

  torch::nn::Sequential model(torch::nn::Linear(8, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 4));
  const auto centres = 2.0 * torch::randn({4, 8});

  // Symtune: the optimizer behind MetaOptimizer, the loop behind AttachedLoop.
  symtune::MetaOptimizer optimizer(
      std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3)));
  symtune::attach::AttachedLoopOptions options;
  options.listen = endpoint;
  options.name = "attachable MLP";
  options.model = "MLP 8-64-64-4";
  options.progress = &std::cout;
  options.pausedLinger = linger;
  symtune::attach::AttachedLoop loop(optimizer, model->named_parameters().pairs(), options);
  running = &loop;
  std::signal(SIGINT, stopOnInterrupt);
  loop.rules().add(symtune::rules::Registry::global().get("nan_guard"));

  for (int64_t i = 0; i < steps && !loop.stopRequested(); ++i) {
    const auto [x, y] = batch(centres, 64);
    const auto r = loop.step(
        [&] {
          auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
          loss.backward();
          return loss;
        },
        x.size(0));
    if (i % 1000 == 0)
      std::cout << "step " << r.step << " loss " << r.loss << std::endl;
  }
  std::cout << (!loop.stopRequested() ? "done"
                : interrupted         ? "stopped by Ctrl-C"
                              : "stopped by a client (or by its pause outlasting the linger)")
            << std::endl;
  std::signal(SIGINT, SIG_DFL);
  running = nullptr;
  return 0;
}
