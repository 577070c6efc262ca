#include "measurement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include "symtune/telemetry/memory_tracker.h"

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

KeptRandomState::KeptRandomState(const std::vector<c10::IValue>& inputs) {
  std::vector<at::Generator> generators{at::detail::getDefaultCPUGenerator()};
  std::set<c10::DeviceIndex> devices;
  for (const auto& v : inputs) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cuda())
      devices.insert(v.toTensor().get_device());
  }
  for (const c10::DeviceIndex d : devices)
    generators.push_back(at::globalContext().defaultGenerator(at::Device(at::kCUDA, d)));
  for (at::Generator& g : generators) {
    std::lock_guard<std::mutex> lock(g.mutex());
    states_.emplace_back(g, g.get_state());
  }
}

void KeptRandomState::restore() const {
  for (const auto& [generator, state] : states_) {
    at::Generator g = generator;
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  }
}

namespace {

// The largest |a - b| over `got` and `want`, and the largest |b| (their scale); nullopt when the
// lists differ in length, shape or definedness.
struct Difference {
  double diff = 0, scale = 0;
};
std::optional<Difference> difference(const std::vector<at::Tensor>& got,
                                     const std::vector<at::Tensor>& want) {
  if (got.size() != want.size())
    return std::nullopt;
  Difference d;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].defined() != want[i].defined())
      return std::nullopt;
    if (!want[i].defined())
      continue;
    if (got[i].sizes() != want[i].sizes())
      return std::nullopt;
    if (want[i].numel() == 0)
      continue;
    const at::Tensor a = got[i].detach().to(at::kDouble);
    const at::Tensor b = want[i].detach().to(at::kDouble);
    // A NaN where the other has none is a disagreement (std::max would drop it); the same NaN or
    // the same infinity in both agrees. The scale is of the finite values.
    const at::Tensor nan = b.isnan();
    if (!at::equal(a.isnan(), nan)) {
      d.diff = std::numeric_limits<double>::infinity();
      continue;
    }
    const at::Tensor gap = at::where(a == b, at::zeros_like(a), (a - b).abs()).masked_fill(nan, 0);
    d.diff = std::max(d.diff, gap.max().item<double>());
    d.scale =
        std::max(d.scale, b.abs().masked_fill(b.isfinite().logical_not(), 0).max().item<double>());
  }
  return d;
}

double scaled(const Difference& d) {
  if (d.diff == 0)
    return 0;
  return d.scale > 0 ? d.diff / d.scale : d.diff;
}

// How many values of `got` differ from `want`'s by more than `tolerance` of the scale, and how
// many values there are.
std::pair<int64_t, int64_t> valuesBeyond(const std::vector<at::Tensor>& got,
                                         const std::vector<at::Tensor>& want, double tolerance) {
  const auto d = difference(got, want);
  if (!d)
    return {0, 0};
  const double bar = tolerance * (d->scale > 0 ? d->scale : 1.0);
  int64_t beyond = 0, total = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!want[i].defined() || want[i].numel() == 0)
      continue;
    const at::Tensor gap =
        (got[i].detach().to(at::kDouble) - want[i].detach().to(at::kDouble)).abs();
    beyond += (gap > bar).sum().item<int64_t>();
    total += want[i].numel();
  }
  return {beyond, total};
}

}  // namespace

double scaledError(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  const auto d = difference(got, want);
  return d ? scaled(*d) : std::numeric_limits<double>::infinity();
}

std::string disagreement(const Replay& got, const Replay& want, double error, double tolerance) {
  char why[192];
  int n = std::snprintf(why, sizeof why, "differs from aten by %.3g (tolerance %.3g)", error,
                        tolerance);
  // Where: the outputs or the gradients, and in how many of their values. A few values among
  // many is what rounding at a kink looks like (a ReLU whose input rounds to either side of 0
  // passes or stops that value's gradient); a wrong kernel differs nearly everywhere.
  const double outputs = scaledError(got.outputs, want.outputs);
  const double grads = scaledError(got.grads, want.grads);
  const bool inOutputs = !(outputs <= tolerance);
  const auto& gotList = inOutputs ? got.outputs : got.grads;
  const auto& wantList = inOutputs ? want.outputs : want.grads;
  if (std::isfinite(inOutputs ? outputs : grads)) {
    const auto [beyond, total] = valuesBeyond(gotList, wantList, tolerance);
    if (total > 0 && n > 0 && n < static_cast<int>(sizeof why)) {
      std::snprintf(why + n, sizeof why - static_cast<size_t>(n), ": %s, %lld of %lld values",
                    inOutputs ? "outputs" : "gradients", static_cast<long long>(beyond),
                    static_cast<long long>(total));
    }
  }
  return why;
}

std::string firstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

int64_t liveCpuBytes(bool cuda) {
  return !cuda && CpuAllocationCounter::active() ? CpuAllocationCounter::counters().current : -1;
}

void finishReplay(std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& leaves,
                  std::vector<at::Tensor>& gradOutputs, bool cuda, bool timed,
                  Clock::time_point forwardStart, int64_t liveAtStart, Replay& out) {
  synchronize(cuda && timed);
  const auto t1 = Clock::now();
  out.keptBytes = liveAtStart >= 0 ? liveCpuBytes(cuda) - liveAtStart : -1;
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
                           const std::string& site, const ReplayWith* onOwnDraws,
                           const std::function<bool(const Candidate&)>& runsAsWritten) {
  const size_t count = candidates.size();
  std::vector<CandidateMeasurement> results(count);
  std::vector<std::vector<double>> forward(count), backward(count);
  Replay reference;
  for (size_t i = 0; i < count; ++i) {
    results[i].name = candidates[i]->name();
    Replay first, own;
    const bool ownDraws = i > 0 && candidates[i]->ownDraws();
    if (i > 0 && runsAsWritten && runsAsWritten(*candidates[i])) {
      results[i].refused = "runs the ops as written on these inputs";
      continue;
    }
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
    results[i].keptBytes = first.keptBytes;
    if (i == 0) {
      reference = std::move(first);
      continue;
    }
    const Replay& want = ownDraws ? own : reference;
    double error = 0;
    try {  // outputs on another device than the reference's cannot be compared: refused
      error =
          std::max(scaledError(first.outputs, want.outputs), scaledError(first.grads, want.grads));
    } catch (const std::exception& e) {
      results[i].maxError = std::numeric_limits<double>::infinity();
      results[i].refused = "not comparable with the reference: " + firstLine(e.what());
      continue;
    }
    results[i].maxError = error;
    if (!(error <= candidates[i]->tolerance()))
      results[i].refused = disagreement(first, want, error, candidates[i]->tolerance());
  }
  for (int rep = 0; rep < repetitions; ++rep) {
    for (size_t i = 0; i < count; ++i) {
      if (!results[i].refused.empty())
        continue;
      Replay r;
      // A candidate that ran once may fail later (out of memory on a GPU): refused, as on its
      // first run. The step goes on; only the reference's failure ends it.
      try {
        replay(*candidates[i], /*timed=*/true, r);
      } catch (const std::exception& e) {
        TORCH_CHECK(i > 0, "Binder: the ATen op at ", site,
                    " failed while measuring: ", firstLine(e.what()));
        results[i].refused = "failed: " + firstLine(e.what());
        continue;
      }
      forward[i].push_back(r.forward);
      backward[i].push_back(r.backward);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (!results[i].refused.empty())
      continue;
    results[i].forwardSeconds = median(forward[i]);
    results[i].backwardSeconds = median(backward[i]);
  }
  const size_t best = fastestAgreeing(results, margin);
  Compared out;
  out.winner = results[best].name;
  out.candidates = std::move(results);
  return out;
}

size_t fastestAgreeing(const std::vector<CandidateMeasurement>& candidates, double margin) {
  size_t best = 0;
  if (candidates.empty())
    return best;
  const double referenceSeconds = candidates.front().seconds();
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (!candidates[i].refused.empty())
      continue;
    if (candidates[i].seconds() < (1.0 - margin) * referenceSeconds &&
        candidates[i].seconds() < candidates[best].seconds())
      best = i;
  }
  return best;
}

// Note [Memory slack]
// By time alone a candidate that keeps less for the backward by running something again in it
// (conv-block-pair-again) never wins: it does the same work and more. Where memory is what the
// run is short of, BinderOptions::memorySlack says how much time the step's sites may give for
// it, as a share of their time bound by time (each measured (site, bucket)'s fastestAgreeing
// winner, summed; the whole-model image-input site left out). Each site starts at that winner; a
// trade moves it to an agreeing candidate keeping at least kLeanerShare less than its choice so
// far — what a candidate keeps being the live CPU bytes its forward left, its outputs and what it
// saved — and is worth the bytes saved per second it gives. The trade worth most that fits what
// is left of the share is taken, again and again (a site may move twice: early exit's second
// stage to the lean pair, then to the pair run again), until none fits. A slack spent per site
// instead (any site within S of its fastest) knew nothing of the others: on early exit the third
// stage's pair run again cost as much of its time as the second's and saved half the bytes, and
// held at the step's peak nothing (that stage's backward ends before the peak, in the second's),
// so the step ran 10 % slower for no memory; and a site's one trade, the one worth most, left the
// second stage at the lean pair where moving on to the pair run again was what the peak needed.
// Measured by the CPU allocation counter: on a GPU nothing is counted and the slack binds by time.
constexpr double kLeanerShare = 0.05;

int spendMemorySlack(const std::vector<Binding*>& bindings, double margin, double slack) {
  // Each measured binding's choice so far: its fastest agreeing candidate to begin with.
  struct Choice {
    Binding* binding;
    const CandidateMeasurement* current;
  };
  std::vector<Choice> choices;
  std::vector<std::string> before;
  double total = 0;
  for (Binding* b : bindings) {
    before.push_back(b->winner);
    if (b->predicted || b->candidates.empty())
      continue;
    const CandidateMeasurement& fastest = b->candidates[fastestAgreeing(b->candidates, margin)];
    b->winner = fastest.name;
    total += fastest.seconds();
    if (fastest.keptBytes >= 0)
      choices.push_back({b, &fastest});
  }
  // Bytes saved per second given, from `from` to `to`; a trade that gives no time is worth any.
  const auto worth = [](const CandidateMeasurement& from, const CandidateMeasurement& to) {
    const double seconds = to.seconds() - from.seconds();
    const double bytes = static_cast<double>(from.keptBytes - to.keptBytes);
    return seconds > 0 ? bytes / seconds : std::numeric_limits<double>::infinity();
  };
  double spent = 0;
  const double allowed = slack * total;
  for (;;) {
    // The trade worth most that fits, of each site's from its choice so far.
    Choice* site = nullptr;
    const CandidateMeasurement* to = nullptr;
    for (Choice& choice : choices) {
      const CandidateMeasurement& from = *choice.current;
      for (const auto& c : choice.binding->candidates) {
        if (!c.refused.empty() || c.keptBytes < 0 ||
            !(static_cast<double>(c.keptBytes) <
              (1.0 - kLeanerShare) * static_cast<double>(from.keptBytes)) ||
            spent + (c.seconds() - from.seconds()) > allowed)
          continue;
        if (to == nullptr || worth(from, c) > worth(*site->current, *to)) {
          site = &choice;
          to = &c;
        }
      }
    }
    if (to == nullptr)
      break;
    spent += to->seconds() - site->current->seconds();
    site->current = to;
    site->binding->winner = to->name;
  }
  int changed = 0;
  for (size_t i = 0; i < bindings.size(); ++i)
    changed += bindings[i]->winner != before[i];
  return changed;
}

}  // namespace symtune::binding::detail
