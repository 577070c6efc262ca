// The session's losses: each kind is PyTorch's function with the session's options, per-position
// outputs flatten against their targets, shapes that do not pair are one line naming both, and
// a micro-batch's weight counts what the loss's mean counts.

#include "doctest_torch.h"

#include <torch/nn/functional/loss.h>

#include "error_of.h"
#include "symtune/runtime/loss.h"

namespace F = torch::nn::functional;

namespace {

symtune::LossSpec lossOf(const std::string& kind) {
  symtune::LossSpec loss;
  loss.kind = kind;
  return loss;
}

}  // namespace

TEST_CASE("each loss kind is PyTorch's with the session's options") {
  torch::manual_seed(3);
  const torch::Tensor logits = torch::randn({6, 4});
  torch::Tensor classes = torch::randint(0, 4, {6}, torch::kLong);
  classes[2] = -1;

  symtune::LossSpec ce = lossOf("cross_entropy");
  ce.ignoreIndex = -1;
  ce.labelSmoothing = 0.1;
  CHECK(symtune::trainingLoss(ce, logits, classes)
            .allclose(F::cross_entropy(
                logits, classes,
                F::CrossEntropyFuncOptions().ignore_index(-1).label_smoothing(0.1))));
  symtune::LossSpec nll = lossOf("nll");
  nll.ignoreIndex = -1;
  const torch::Tensor logProbs = torch::log_softmax(logits, 1);
  CHECK(symtune::trainingLoss(nll, logProbs, classes)
            .allclose(F::nll_loss(logProbs, classes, F::NLLLossFuncOptions().ignore_index(-1))));
  CHECK(symtune::countedTargets(ce, classes) == 5);

  const torch::Tensor values = torch::randn({6, 4});
  CHECK(symtune::trainingLoss(lossOf("mse"), logits, values).allclose(F::mse_loss(logits, values)));
  CHECK(symtune::trainingLoss(lossOf("l1"), logits, values).allclose(F::l1_loss(logits, values)));
  symtune::LossSpec smooth = lossOf("smooth_l1");
  smooth.beta = 0.5;
  CHECK(symtune::trainingLoss(smooth, logits, values)
            .allclose(F::smooth_l1_loss(logits, values, F::SmoothL1LossFuncOptions().beta(0.5))));
  const torch::Tensor bits = values.gt(0).to(torch::kFloat);
  CHECK(symtune::trainingLoss(lossOf("bce_with_logits"), logits, bits)
            .allclose(F::binary_cross_entropy_with_logits(logits, bits)));
  CHECK(symtune::countedTargets(lossOf("mse"), values) == 24);

  // A regression target [N] against an output [N, 1].
  const torch::Tensor one = torch::randn({6, 1}), target = torch::randn({6});
  CHECK(symtune::trainingLoss(lossOf("mse"), one, target)
            .allclose(F::mse_loss(one, target.unsqueeze(1))));
}

TEST_CASE("per-position outputs flatten against their targets; unpaired shapes say both") {
  torch::manual_seed(4);
  const torch::Tensor perToken = torch::randn({3, 5, 7});
  torch::Tensor tags = torch::randint(0, 7, {3, 5}, torch::kLong);
  tags[1][4] = -100;
  const symtune::LossSpec ce;
  const torch::Tensor want = F::cross_entropy(perToken.reshape({15, 7}), tags.reshape({15}));
  CHECK(symtune::trainingLoss(ce, perToken, tags).allclose(want));
  CHECK(symtune::trainingLoss(ce, perToken.reshape({15, 7}), tags).allclose(want));

  CHECK(
      symtune::test::errorOf([&] { symtune::trainingLoss(ce, perToken, tags.narrow(1, 0, 4)); }) ==
      "cross_entropy: the output [3, 5, 7] and the target [3, 4] do not pair (it takes "
      "logits [N, C] against class indices [N], per position [N, T, C] against [N, T])");
  CHECK(symtune::test::errorOf([&] {
          symtune::trainingLoss(lossOf("mse"), torch::randn({4, 2}), torch::randn({4, 3}));
        }) ==
        "mse: the output [4, 2] and the target [4, 3] do not pair (it takes a target "
        "shaped as the output)");
}
