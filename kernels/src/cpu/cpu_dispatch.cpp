// Registers the CPU implementations of Symtune's operators, each choosing at run time among the
// kernels built for AVX-512, for AVX2 + FMA and the portable ones (Note [CPU capabilities]).

#include <algorithm>
#include <cstdlib>
#include <string>

#include <torch/library.h>

#include "cpu_kernels.h"
#include "symtune/kernels/cpu_capability.h"

namespace symtune::kernels {

namespace {

// Note [CPU capabilities]
// at::vec compiles to whatever the translation unit may use: without flags, plain loops (and
// one std::erf call per element); with -mavx2 -mfma or the AVX-512 flags, 256- or 512-bit
// registers and Sleef's vectorized functions (exported by libtorch_cpu). ATen builds its own
// kernels per capability and picks the best at run time; so do we, for the kernels in
// cpu_kernels.h: each is compiled into the namespaces DEFAULT, AVX2 and AVX512, and a build runs
// only on a CPU that has its instructions — the same choice ATen makes, so the fused ops are
// measured against ATen's kernels on equal terms. Only the kernel files get the flags. As with
// ATen's own per-capability builds, an inline function of a shared header (c10, ATen) that the
// builds instantiate may be kept from a wider build's objects by the linker, so x86-64 CPUs
// without AVX2 (older than 2013) are not a target.
enum class Capability { Default, Avx2, Avx512 };

// SYMTUNE_CPU_CAPABILITY=default|avx2|avx512 lowers the choice (never above what the CPU has), as
// ATEN_CPU_CAPABILITY does for ATen's kernels: the tests run the narrower builds this way on a
// machine that would otherwise always take the widest.
Capability requested(Capability best) {
  const char* env = std::getenv("SYMTUNE_CPU_CAPABILITY");
  if (env == nullptr || *env == '\0')
    return best;
  const std::string name(env);
  Capability asked;
  if (name == "default") {
    asked = Capability::Default;
  } else if (name == "avx2") {
    asked = Capability::Avx2;
  } else if (name == "avx512") {
    asked = Capability::Avx512;
  } else {
    TORCH_WARN("SYMTUNE_CPU_CAPABILITY=", name,
               " is not one of default, avx2, avx512; using the CPU's best");
    return best;
  }
  return std::min(asked, best);
}

Capability capability() {
#ifdef SYMTUNE_HAVE_X86_KERNELS
  static const Capability chosen = [] {
    Capability best = Capability::Default;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma"))
      best = Capability::Avx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      best = Capability::Avx2;
    return requested(best);
  }();
  return chosen;
#else
  return requested(Capability::Default);
#endif
}

#ifdef SYMTUNE_HAVE_X86_KERNELS
#define SYMTUNE_CPU_CALL(fn, ...)                               \
  (capability() == Capability::Avx512 ? AVX512::fn(__VA_ARGS__) \
   : capability() == Capability::Avx2 ? AVX2::fn(__VA_ARGS__)   \
                                      : DEFAULT::fn(__VA_ARGS__))
#else
#define SYMTUNE_CPU_CALL(fn, ...) DEFAULT::fn(__VA_ARGS__)
#endif

at::Tensor biasGelu(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                    c10::string_view approximate) {
  return SYMTUNE_CPU_CALL(biasGeluCpu, input, bias, approximate);
}

std::tuple<at::Tensor, at::Tensor> biasGeluBackward(const at::Tensor& grad, const at::Tensor& input,
                                                    const std::optional<at::Tensor>& bias,
                                                    c10::string_view approximate) {
  return SYMTUNE_CPU_CALL(biasGeluBackwardCpu, grad, input, bias, approximate);
}

at::Tensor biasDropoutAdd(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                          const at::Tensor& residual, double p, int64_t seed) {
  return SYMTUNE_CPU_CALL(biasDropoutAddCpu, input, bias, residual, p, seed);
}

std::tuple<at::Tensor, at::Tensor> biasDropoutAddBackward(const at::Tensor& grad,
                                                          const std::optional<at::Tensor>& bias,
                                                          double p, int64_t seed) {
  return SYMTUNE_CPU_CALL(biasDropoutAddBackwardCpu, grad, bias, p, seed);
}

void fusedAdam(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
               at::TensorList expAvgSqs, c10::IntArrayRef steps, double lr, double beta1,
               double beta2, double eps, double weightDecay, bool decoupled) {
  SYMTUNE_CPU_CALL(fusedAdamCpu, params, grads, expAvgs, expAvgSqs, steps, lr, beta1, beta2, eps,
                   weightDecay, decoupled);
}

void fusedSgd(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,
              c10::IntArrayRef fresh, double lr, double momentum, double dampening,
              double weightDecay, bool nesterov) {
  SYMTUNE_CPU_CALL(fusedSgdCpu, params, grads, momentumBuffers, fresh, lr, momentum, dampening,
                   weightDecay, nesterov);
}

at::Tensor rmsClamp(at::TensorList grads) {
  return SYMTUNE_CPU_CALL(rmsClampCpu, grads);
}

at::Tensor clipGradNorm(at::TensorList grads, double maxNorm) {
  return SYMTUNE_CPU_CALL(clipGradNormCpu, grads, maxNorm);
}

std::tuple<at::Tensor, at::Tensor> softmaxCrossEntropyForward(const at::Tensor& logits,
                                                              const at::Tensor& target,
                                                              int64_t ignoreIndex) {
  return SYMTUNE_CPU_CALL(softmaxCrossEntropyForwardCpu, logits, target, ignoreIndex);
}

at::Tensor softmaxCrossEntropyBackward(const at::Tensor& grad, const at::Tensor& logits,
                                       const at::Tensor& target, const at::Tensor& lse,
                                       int64_t ignoreIndex) {
  return SYMTUNE_CPU_CALL(softmaxCrossEntropyBackwardCpu, grad, logits, target, lse, ignoreIndex);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> addLayerNormForward(
    const at::Tensor& input, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps) {
  return SYMTUNE_CPU_CALL(addLayerNormForwardCpu, input, residual, weight, bias, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> addLayerNormBackward(
    const at::Tensor& gradOut, const std::optional<at::Tensor>& gradSum, const at::Tensor& sum,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight) {
  return SYMTUNE_CPU_CALL(addLayerNormBackwardCpu, gradOut, gradSum, sum, mean, rstd, weight);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormReluForward(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
    const std::optional<at::Tensor>& runningMean, const std::optional<at::Tensor>& runningVar,
    double momentum, double eps) {
  return SYMTUNE_CPU_CALL(batchNormReluForwardCpu, input, weight, bias, runningMean, runningVar,
                          momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormReluBackward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& output,
    const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& invstd) {
  return SYMTUNE_CPU_CALL(batchNormReluBackwardCpu, grad, input, output, weight, mean, invstd);
}

at::Tensor gruCellForward(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
                          const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  return SYMTUNE_CPU_CALL(gruCellForwardCpu, gatesIn, gatesHidden, hidden, keep);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gruCellBackward(
    const at::Tensor& grad, const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
    const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  return SYMTUNE_CPU_CALL(gruCellBackwardCpu, grad, gatesIn, gatesHidden, hidden, keep);
}

}  // namespace

std::string cpuCapability() {
  switch (capability()) {
    case Capability::Avx512:
      return "avx512";
    case Capability::Avx2:
      return "avx2";
    case Capability::Default:
      break;
  }
  return "default";
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CPU, m) {
  m.impl("bias_gelu", &symtune::kernels::biasGelu);
  m.impl("bias_gelu_backward", &symtune::kernels::biasGeluBackward);
  m.impl("bias_dropout_add_forward", &symtune::kernels::biasDropoutAdd);
  m.impl("bias_dropout_add_backward", &symtune::kernels::biasDropoutAddBackward);
  m.impl("fused_adam_", &symtune::kernels::fusedAdam);
  m.impl("fused_sgd_", &symtune::kernels::fusedSgd);
  m.impl("rms_clamp_", &symtune::kernels::rmsClamp);
  m.impl("clip_grad_norm_", &symtune::kernels::clipGradNorm);
  m.impl("softmax_cross_entropy_forward", &symtune::kernels::softmaxCrossEntropyForward);
  m.impl("softmax_cross_entropy_backward", &symtune::kernels::softmaxCrossEntropyBackward);
  m.impl("add_layer_norm_forward", &symtune::kernels::addLayerNormForward);
  m.impl("add_layer_norm_backward", &symtune::kernels::addLayerNormBackward);
  m.impl("batch_norm_relu_forward", &symtune::kernels::batchNormReluForward);
  m.impl("batch_norm_relu_backward", &symtune::kernels::batchNormReluBackward);
  m.impl("gru_cell_forward", &symtune::kernels::gruCellForward);
  m.impl("gru_cell_backward", &symtune::kernels::gruCellBackward);
}
