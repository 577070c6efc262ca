#include "symtune/runtime/loss.h"

#include <sstream>
#include <stdexcept>

#include <torch/nn/functional/loss.h>

namespace symtune {

namespace {

namespace F = torch::nn::functional;

std::string shapeText(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

[[noreturn]] void unpaired(const LossSpec& loss, const torch::Tensor& output,
                           const torch::Tensor& target, const char* takes) {
  throw std::invalid_argument(loss.kind + ": the output " + shapeText(output) + " and the target " +
                              shapeText(target) + " do not pair (it takes " + takes + ")");
}

}  // namespace

torch::Tensor trainingLoss(const LossSpec& loss, const torch::Tensor& output,
                           const torch::Tensor& target) {
  if (loss.classIndices()) {
    constexpr const char* takes =
        "logits [N, C] against class indices [N], per position [N, T, C] against [N, T]";
    if (output.dim() < 2 || !output.is_floating_point() || target.is_floating_point())
      unpaired(loss, output, target, takes);
    const torch::Tensor scores = output.reshape({-1, output.size(-1)});
    const torch::Tensor indices = target.reshape({-1});
    if (indices.size(0) != scores.size(0))
      unpaired(loss, output, target, takes);
    if (loss.kind == "nll")
      return F::nll_loss(scores, indices, F::NLLLossFuncOptions().ignore_index(loss.ignoreIndex));
    return F::cross_entropy(scores, indices,
                            F::CrossEntropyFuncOptions()
                                .ignore_index(loss.ignoreIndex)
                                .label_smoothing(loss.labelSmoothing));
  }
  torch::Tensor values = target;
  if (values.sizes() != output.sizes()) {
    if (output.dim() == 2 && output.size(1) == 1 && values.dim() == 1 &&
        values.size(0) == output.size(0))
      values = values.unsqueeze(1);
    else
      unpaired(loss, output, target, "a target shaped as the output");
  }
  values = values.to(output.scalar_type());
  if (loss.kind == "mse")
    return F::mse_loss(output, values);
  if (loss.kind == "l1")
    return F::l1_loss(output, values);
  if (loss.kind == "smooth_l1")
    return F::smooth_l1_loss(output, values, F::SmoothL1LossFuncOptions().beta(loss.beta));
  if (loss.kind == "bce_with_logits")
    return F::binary_cross_entropy_with_logits(output, values);
  throw std::invalid_argument("unknown loss " + loss.kind);
}

int64_t countedTargets(const LossSpec& loss, const torch::Tensor& target) {
  if (target.is_floating_point() || !loss.classIndices())
    return target.numel();
  return target.ne(loss.ignoreIndex).sum().item<int64_t>();
}

}  // namespace symtune
