#pragma once
// The CPU kernels, compiled once per instruction set (Note [CPU capabilities]): each kernel
// source is built with CPU_CAPABILITY=DEFAULT and, on x86-64, with CPU_CAPABILITY=AVX2 (-mavx2
// -mfma) and CPU_CAPABILITY=AVX512 (-mavx512f/bw/vl/dq), where at::vec uses 256- or 512-bit
// registers and Sleef's vectorized erf, exp and tanh, into namespaces of those names;
// cpu_dispatch.cpp registers the operators and picks one at run time.
// Private to kernels/.

#include <optional>
#include <tuple>

#include <ATen/ATen.h>

#define SYMTUNE_DECLARE_CPU_KERNELS(capability)                                                    \
  namespace symtune::kernels::capability {                                                         \
  at::Tensor biasGeluCpu(const at::Tensor& input, const std::optional<at::Tensor>& bias,           \
                         c10::string_view approximate);                                            \
  std::tuple<at::Tensor, at::Tensor> biasGeluBackwardCpu(const at::Tensor& grad,                   \
                                                         const at::Tensor& input,                  \
                                                         const std::optional<at::Tensor>& bias,    \
                                                         c10::string_view approximate);            \
  at::Tensor biasDropoutAddCpu(const at::Tensor& input, const std::optional<at::Tensor>& bias,     \
                               const at::Tensor& residual, double p, int64_t seed);                \
  std::tuple<at::Tensor, at::Tensor> biasDropoutAddBackwardCpu(                                    \
      const at::Tensor& grad, const std::optional<at::Tensor>& bias, double p, int64_t seed);      \
  void fusedAdamCpu(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,           \
                    at::TensorList expAvgSqs, c10::IntArrayRef steps, double lr, double beta1,     \
                    double beta2, double eps, double weightDecay, bool decoupled);                 \
  void fusedSgdCpu(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,    \
                   c10::IntArrayRef fresh, double lr, double momentum, double dampening,           \
                   double weightDecay, bool nesterov);                                             \
  at::Tensor rmsClampCpu(at::TensorList grads);                                                    \
  at::Tensor clipGradNormCpu(at::TensorList grads, double maxNorm);                                \
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> addLayerNormForwardCpu(               \
      const at::Tensor& input, const at::Tensor& residual,                                         \
      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps); \
  std::tuple<at::Tensor, at::Tensor, at::Tensor> addLayerNormBackwardCpu(                          \
      const at::Tensor& gradOut, const std::optional<at::Tensor>& gradSum, const at::Tensor& sum,  \
      const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight);    \
  std::tuple<at::Tensor, at::Tensor> softmaxCrossEntropyForwardCpu(const at::Tensor& logits,       \
                                                                   const at::Tensor& target,       \
                                                                   int64_t ignoreIndex);           \
  at::Tensor softmaxCrossEntropyBackwardCpu(const at::Tensor& grad, const at::Tensor& logits,      \
                                            const at::Tensor& target, const at::Tensor& lse,       \
                                            int64_t ignoreIndex);                                  \
  std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormReluForwardCpu(                          \
      const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,                   \
      const std::optional<at::Tensor>& runningMean, const std::optional<at::Tensor>& runningVar,   \
      double momentum, double eps);                                                                \
  std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormReluBackwardCpu(                         \
      const at::Tensor& grad, const at::Tensor& input, const at::Tensor& output,                   \
      const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& invstd);                 \
  at::Tensor gruCellForwardCpu(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,           \
                               const at::Tensor& hidden, const std::optional<at::Tensor>& keep);   \
  std::tuple<at::Tensor, at::Tensor, at::Tensor> gruCellBackwardCpu(                               \
      const at::Tensor& grad, const at::Tensor& gatesIn, const at::Tensor& gatesHidden,            \
      const at::Tensor& hidden, const std::optional<at::Tensor>& keep);                            \
  }

SYMTUNE_DECLARE_CPU_KERNELS(DEFAULT)
#ifdef SYMTUNE_HAVE_X86_KERNELS
SYMTUNE_DECLARE_CPU_KERNELS(AVX2)
SYMTUNE_DECLARE_CPU_KERNELS(AVX512)
#endif
