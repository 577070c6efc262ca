#include "measurement.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

namespace symtune::binding::detail {

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Binding siteBinding(const OpSite& site, const std::string& bucket) {
  Binding b;
  b.site = site.name;
  b.node = site.id.value();
  b.pattern = site.pattern;
  b.bucket = bucket;
  b.reference = kAten;
  return b;
}

void synchronize(bool cuda) {
  if (cuda)
    torch::cuda::synchronize();
}

double scaledError(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  if (got.size() != want.size())
    return std::numeric_limits<double>::infinity();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].defined() != want[i].defined())
      return std::numeric_limits<double>::infinity();
    if (!want[i].defined())
      continue;
    if (got[i].sizes() != want[i].sizes())
      return std::numeric_limits<double>::infinity();
    if (want[i].numel() == 0)
      continue;
    const at::Tensor a = got[i].detach().to(at::kDouble);
    const at::Tensor b = want[i].detach().to(at::kDouble);
    diff = std::max(diff, (a - b).abs().max().item<double>());
    scale = std::max(scale, b.abs().max().item<double>());
  }
  if (diff == 0)
    return 0;
  return scale > 0 ? diff / scale : diff;
}

std::string disagreement(double error, double tolerance) {
  char why[96];
  std::snprintf(why, sizeof why, "differs from aten by %.3g (tolerance %.3g)", error, tolerance);
  return why;
}

std::string firstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

void finishReplay(std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& leaves,
                  std::vector<at::Tensor>& gradOutputs, bool cuda, bool timed,
                  Clock::time_point forwardStart, Replay& out) {
  synchronize(cuda && timed);
  const auto t1 = Clock::now();
  std::vector<at::Tensor> diffOutputs, grads;
  for (const auto& o : outputs) {
    if (o.defined() && o.requires_grad())
      diffOutputs.push_back(o);
  }
  if (!leaves.empty() && !diffOutputs.empty()) {
    if (gradOutputs.empty()) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(20261201);
      for (const auto& o : diffOutputs) {
        gradOutputs.push_back(
            at::randn(o.sizes(), gen, o.options().device(at::kCPU)).to(o.device()));
      }
    }
    TORCH_INTERNAL_ASSERT(gradOutputs.size() == diffOutputs.size(),
                          "Binder: candidates gave different numbers of outputs");
    grads = torch::autograd::grad(diffOutputs, leaves, gradOutputs, /*retain_graph=*/false,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  }
  synchronize(cuda && timed);
  const auto t2 = Clock::now();
  out.outputs = std::move(outputs);
  out.grads = std::move(grads);
  out.forward = std::chrono::duration<double>(t1 - forwardStart).count();
  out.backward = std::chrono::duration<double>(t2 - t1).count();
}

Compared compareCandidates(const std::vector<const Candidate*>& candidates,
                           const ReplayWith& replay, int repetitions, double margin,
                           const std::string& site, const ReplayWith* onOwnDraws) {
  const size_t count = candidates.size();
  std::vector<CandidateMeasurement> results(count);
  std::vector<std::vector<double>> forward(count), backward(count);
  Replay reference;
  for (size_t i = 0; i < count; ++i) {
    results[i].name = candidates[i]->name();
    Replay first, own;
    const bool ownDraws = i > 0 && candidates[i]->ownDraws();
    if (ownDraws && onOwnDraws == nullptr) {
      results[i].refused =
          "draws its own random numbers, and this site has nothing to hold them to";
      continue;
    }
    try {
      replay(*candidates[i], /*timed=*/false, first);
      if (ownDraws)
        (*onOwnDraws)(*candidates[i], /*timed=*/false, own);
    } catch (const std::exception& e) {
      TORCH_CHECK(i > 0, "Binder: the ATen op at ", site,
                  " failed while measuring: ", firstLine(e.what()));
      results[i].refused = "failed: " + firstLine(e.what());
      continue;
    }
    if (i == 0) {
      reference = std::move(first);
      continue;
    }
    const Replay& want = ownDraws ? own : reference;
    const double error =
        std::max(scaledError(first.outputs, want.outputs), scaledError(first.grads, want.grads));
    results[i].maxError = error;
    if (!(error <= candidates[i]->tolerance()))
      results[i].refused = disagreement(error, candidates[i]->tolerance());
  }
  for (int rep = 0; rep < repetitions; ++rep) {
    for (size_t i = 0; i < count; ++i) {
      if (!results[i].refused.empty())
        continue;
      Replay r;
      replay(*candidates[i], /*timed=*/true, r);
      forward[i].push_back(r.forward);
      backward[i].push_back(r.backward);
    }
  }
  size_t best = 0;
  for (size_t i = 0; i < count; ++i) {
    results[i].forwardSeconds = median(forward[i]);
    results[i].backwardSeconds = median(backward[i]);
  }
  const double referenceSeconds = results[0].seconds();
  for (size_t i = 1; i < count; ++i) {
    if (!results[i].refused.empty())
      continue;
    if (results[i].seconds() < (1.0 - margin) * referenceSeconds &&
        results[i].seconds() < results[best].seconds())
      best = i;
  }
  Compared out;
  out.winner = results[best].name;
  out.candidates = std::move(results);
  return out;
}

}  // namespace symtune::binding::detail
