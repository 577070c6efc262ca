// CPU implementation of symtune::fused_adam_ and symtune::fused_sgd_: one parallel loop over the
// elements of all tensors (split by elements, so the threads get equal work), each range one
// vectorized pass (at::vec) that reads a parameter's element, its gradient and state once and
// writes them once.
//
// Note [One pass]
// torch::optim::Adam runs about ten ATen ops per parameter per step (mul_, add_, addcmul_, sqrt,
// div, add_, addcdiv_, ...): ten passes over memory, and ten dispatches per parameter — for a
// ResNet's hundreds of small tensors, the dispatches dominate. Here each element of p, g, m and v
// is loaded once and p, m and v are stored once: 7 numbers of traffic per element, the least
// the update needs, and one dispatch for the whole model.

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/vec.h>

#include "../contiguous_lists.h"
#include "../fused_optim_checks.h"
#include "../parallel.h"
#include "cpu_kernels.h"
#include "symtune/kernels/fused_optim.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

constexpr int64_t kGrain = 32768;  // elements per chunk

template <typename T>
struct AdamCoefficients {
  T beta1, beta2, oneMinusBeta1, oneMinusBeta2, eps, stepSize, bc2Sqrt, decay, weightDecay;
  bool coupled;  // weight decay added to the gradient (Adam), not to the parameter (AdamW)
};

// The bias corrections of a tensor's step: lr / (1 - beta1^t) and sqrt(1 - beta2^t), once per
// tensor (not per chunk).
struct BiasCorrection {
  double stepSize, bc2Sqrt;
};

BiasCorrection biasCorrection(const AdamHyper& h, int64_t step) {
  const double t = static_cast<double>(step);
  return {h.lr / (1 - std::pow(h.beta1, t)), std::sqrt(1 - std::pow(h.beta2, t))};
}

template <typename T, typename Opmath>
AdamCoefficients<Opmath> adamCoefficients(const AdamHyper& h, const BiasCorrection& bc) {
  AdamCoefficients<Opmath> c{};
  c.beta1 = static_cast<Opmath>(h.beta1);
  c.beta2 = static_cast<Opmath>(h.beta2);
  c.oneMinusBeta1 = static_cast<Opmath>(1 - h.beta1);
  c.oneMinusBeta2 = static_cast<Opmath>(1 - h.beta2);
  c.eps = static_cast<Opmath>(h.eps);
  c.stepSize = static_cast<Opmath>(bc.stepSize);
  c.bc2Sqrt = static_cast<Opmath>(bc.bc2Sqrt);
  c.coupled = !h.decoupled && h.weightDecay != 0;
  c.weightDecay = static_cast<Opmath>(h.weightDecay);
  c.decay = static_cast<Opmath>(h.decoupled ? 1 - h.lr * h.weightDecay : 1);
  return c;
}

// One element, scalar: the tail of a chunk, and every element of reduced-precision tensors.
template <typename T, typename Opmath>
inline void adamElement(T& p, const T& grad, T& m, T& v, const AdamCoefficients<Opmath>& c) {
  Opmath pv = static_cast<Opmath>(p), g = static_cast<Opmath>(grad);
  if (c.coupled)
    g = g + c.weightDecay * pv;
  pv = pv * c.decay;
  const Opmath mv = static_cast<Opmath>(m) * c.beta1 + c.oneMinusBeta1 * g;
  const Opmath vv = static_cast<Opmath>(v) * c.beta2 + c.oneMinusBeta2 * g * g;
  const Opmath denom = std::sqrt(vv) / c.bc2Sqrt + c.eps;
  p = static_cast<T>(pv - c.stepSize * mv / denom);
  m = static_cast<T>(mv);
  v = static_cast<T>(vv);
}

template <typename T>
void adamChunk(T* p, const T* g, T* m, T* v, int64_t begin, int64_t end,
               const AdamCoefficients<at::opmath_type<T>>& c) {
  using Opmath = at::opmath_type<T>;
  int64_t i = begin;
  if constexpr (std::is_same_v<T, Opmath>) {  // float, double: vectorized
    using Vec = at::vec::Vectorized<T>;
    const Vec beta1(c.beta1), beta2(c.beta2), oneMinusBeta1(c.oneMinusBeta1),
        oneMinusBeta2(c.oneMinusBeta2), eps(c.eps), stepSize(c.stepSize), bc2Sqrt(c.bc2Sqrt),
        decay(c.decay), weightDecay(c.weightDecay);
    for (; i + Vec::size() <= end; i += Vec::size()) {
      Vec pv = Vec::loadu(p + i);
      Vec gv = Vec::loadu(g + i);
      if (c.coupled)
        gv = gv + weightDecay * pv;
      pv = pv * decay;
      const Vec mv = Vec::loadu(m + i) * beta1 + oneMinusBeta1 * gv;
      const Vec vv = Vec::loadu(v + i) * beta2 + oneMinusBeta2 * gv * gv;
      const Vec denom = vv.sqrt() / bc2Sqrt + eps;
      (pv - stepSize * mv / denom).store(p + i);
      mv.store(m + i);
      vv.store(v + i);
    }
  }
  for (; i < end; ++i)
    adamElement(p[i], g[i], m[i], v[i], c);
}

}  // namespace

void fusedAdamCpu(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
                  at::TensorList expAvgSqs, c10::IntArrayRef steps, double lr, double beta1,
                  double beta2, double eps, double weightDecay, bool decoupled) {
  checkFusedAdamArguments(params, grads, expAvgs, expAvgSqs, steps);
  const AdamHyper h{lr, beta1, beta2, eps, weightDecay, decoupled};
  ContiguousList p, g, m, v;
  for (size_t i = 0; i < params.size(); ++i) {
    p.add(params[i], true);
    g.add(grads[i], false);
    m.add(expAvgs[i], true);
    v.add(expAvgSqs[i], true);
  }
  std::vector<BiasCorrection> corrections;
  for (size_t t = 0; t < p.size(); ++t)
    corrections.push_back(biasCorrection(h, steps[t]));
  parallelOverElements(p.tensors(), kGrain, [&](size_t t, int64_t begin, int64_t end) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, p[t].scalar_type(), "fused_adam_cpu", [&] {
          using Opmath = at::opmath_type<scalar_t>;
          const auto c = adamCoefficients<scalar_t, Opmath>(h, corrections[t]);
          adamChunk(p[t].data_ptr<scalar_t>(), g[t].const_data_ptr<scalar_t>(),
                    m[t].data_ptr<scalar_t>(), v[t].data_ptr<scalar_t>(), begin, end, c);
        });
  });
  p.writeBack();
  m.writeBack();
  v.writeBack();
}

namespace {

template <typename T>
void sgdChunk(T* p, const T* g, T* buf, bool fresh, int64_t begin, int64_t end, const SgdHyper& h) {
  using Opmath = at::opmath_type<T>;
  const Opmath lr = static_cast<Opmath>(h.lr), wd = static_cast<Opmath>(h.weightDecay),
               momentum = static_cast<Opmath>(h.momentum),
               keep = static_cast<Opmath>(1 - h.dampening);
  int64_t i = begin;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    const Vec lrV(lr), wdV(wd), momentumV(momentum), keepV(keep);
    for (; i + Vec::size() <= end; i += Vec::size()) {
      Vec pv = Vec::loadu(p + i);
      Vec d = Vec::loadu(g + i);
      if (h.weightDecay != 0)
        d = d + wdV * pv;
      if (buf != nullptr) {
        const Vec b = fresh ? d : Vec::loadu(buf + i) * momentumV + keepV * d;
        b.store(buf + i);
        d = h.nesterov ? d + momentumV * b : b;
      }
      (pv - lrV * d).store(p + i);
    }
  }
  for (; i < end; ++i) {
    const Opmath pv = static_cast<Opmath>(p[i]);
    Opmath d = static_cast<Opmath>(g[i]);
    if (h.weightDecay != 0)
      d = d + wd * pv;
    if (buf != nullptr) {
      const Opmath b = fresh ? d : static_cast<Opmath>(buf[i]) * momentum + keep * d;
      buf[i] = static_cast<T>(b);
      d = h.nesterov ? d + momentum * b : b;
    }
    p[i] = static_cast<T>(pv - lr * d);
  }
}

}  // namespace

void fusedSgdCpu(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,
                 c10::IntArrayRef fresh, double lr, double momentum, double dampening,
                 double weightDecay, bool nesterov) {
  checkFusedSgdArguments(params, grads, momentumBuffers, fresh, momentum);
  const SgdHyper h{lr, momentum, dampening, weightDecay, nesterov};
  const bool buffers = momentum != 0;
  ContiguousList p, g, b;
  for (size_t i = 0; i < params.size(); ++i) {
    p.add(params[i], true);
    g.add(grads[i], false);
    if (buffers)
      b.add(momentumBuffers[i], true);
  }
  parallelOverElements(p.tensors(), kGrain, [&](size_t t, int64_t begin, int64_t end) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, p[t].scalar_type(), "fused_sgd_cpu", [&] {
          sgdChunk(p[t].data_ptr<scalar_t>(), g[t].const_data_ptr<scalar_t>(),
                   buffers ? b[t].data_ptr<scalar_t>() : nullptr, buffers && fresh[t] != 0, begin,
                   end, h);
        });
  });
  p.writeBack();
  b.writeBack();
}

}  // namespace symtune::kernels::CPU_CAPABILITY
