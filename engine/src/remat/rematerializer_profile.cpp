// A profile per batch (Note [A profile per batch] in symtune/remat/rematerializer.h): each batch
// counted on its shapes alone, and what that may cost.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "../binding/measurement.h"
#include "symtune/remat/rematerializer.h"

namespace symtune::remat {

namespace {

// The batch shapes whose counts are kept (Note [A profile per batch]).
constexpr size_t kShapeCounts = 512;
// Note [What a profile per batch may cost]: the steps its share (RematOptions::profileShare) is
// taken over, the last kCostWindow once kCostSteps are seen.
constexpr size_t kCostWindow = 16;
constexpr size_t kCostSteps = 4;

// The inputs' exact shapes and dtypes, and their scalars' values: what a forward on shapes alone
// depends on (Note [A profile per batch]).
void describeExactly(const c10::IValue& value, std::string& out) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) {
      out += "undefined;";
      return;
    }
    out += std::string(c10::toString(t.scalar_type())) + t.device().str() + "[";
    for (const int64_t d : t.sizes())
      out += std::to_string(d) + ",";
    out += "];";
  } else if (value.isList() || value.isTuple()) {
    out += "(";
    const auto items =
        value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
    for (const auto& item : items)
      describeExactly(item, out);
    out += ");";
  } else if (value.isInt() || value.isDouble() || value.isBool() || value.isString() ||
             value.isNone()) {
    std::ostringstream text;
    text << value;
    out += text.str() + ";";
  } else {
    out += value.tagKind() + ";";
  }
}

}  // namespace

bool Rematerializer::countShapes(SyMuGen& gen, const std::vector<c10::IValue>& inputs,
                                 Bucket& bucket) {
  if (!options_.profilePerBatch || shapesRun_ == false)
    return false;
  std::string exact;
  for (const auto& in : inputs)
    describeExactly(in, exact);
  auto found = shapeCounts_.find(exact);
  if (found == shapeCounts_.end()) {
    ForwardOptions counting;
    counting.countCost = true;
    counting.shapesOnly = true;
    ForwardCost cost;
    try {
      // On the meta device nothing touches the model's buffers, and its dropouts draw nothing;
      // a factory op with no device (torch.rand(n) moved .to(x.device)) runs on the CPU and
      // draws from the run's generator: put back, also on a throw (until 2026-12-07 each new
      // shape moved the run's masks).
      torch::NoGradGuard noGrad;
      struct PutBack {
        binding::detail::KeptRandomState random;
        ~PutBack() { random.restore(); }
      } putBack{binding::detail::KeptRandomState(inputs)};
      cost = gen.forward(inputs, counting).cost;
    } catch (const c10::Error& e) {
      shapesRun_ = false;
      // The op and what it said, without PyTorch's advice on compilers.
      const std::string why = e.what_without_backtrace();
      stats_.shapesRefused = why.substr(0, std::min(why.find('\n'), why.find(". ")));
      return false;
    }
    shapesRun_ = true;
    ++stats_.shapeProfiles;
    if (shapeCounts_.size() >= kShapeCounts)
      shapeCounts_.clear();  // a run whose every batch has new shapes: counted again as they come
    std::vector<RematUnit> units = rematUnits(gen, cost, 1.0, options_.secondsPerFlop,
                                              options_.secondsPerByte, options_.secondsPerSpan);
    found = shapeCounts_.emplace(exact, std::make_pair(std::move(cost), std::move(units))).first;
  }
  bucket.profile = found->second.first;
  bucket.units = found->second.second;
  return true;
}

StepPlan Rematerializer::prepare(SyMuGen& gen, const std::vector<c10::IValue>& inputs,
                                 int64_t reserved) {
  // Note [What a profile per batch may cost]
  // A count on shapes alone costs each op's dispatch, and a plan per batch more planning: on
  // Transformer-XL 3.7 ms a batch against a step of 160 ms, but on the tree network 0.6 ms against
  // micro-batches of 1-2 ms, and on the tagger 8 ms against a bound step of 50. So the time
  // prepare() takes while it profiles each batch is set against the time from one prepare() to
  // the next (the step, or the micro-batch, it planned): past RematOptions::profileShare of it,
  // 5 % by default, at the median of the last steps, the run goes back to a profile per bucket.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  if (lastPrepare_) {
    intervals_.push_back(std::chrono::duration<double>(start - *lastPrepare_).count());
    if (intervals_.size() > kCostWindow)
      intervals_.pop_front();
  }
  lastPrepare_ = start;
  StepPlan plan = prepareStep(gen, inputs, reserved);
  if (shapesRun_ == true) {
    preparing_.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (preparing_.size() > kCostWindow)
      preparing_.pop_front();
    const auto median = [](std::deque<double> v) {
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    if (preparing_.size() >= kCostSteps && intervals_.size() >= kCostSteps &&
        median(preparing_) > options_.profileShare * median(intervals_)) {
      shapesRun_ = false;
      char why[160];
      std::snprintf(why, sizeof why,
                    "a profile per batch took %.2f ms of the %.2f ms from one step's plan to the "
                    "next (more than %.0f %%)",
                    median(preparing_) * 1e3, median(intervals_) * 1e3,
                    options_.profileShare * 100);
      stats_.shapesRefused = why;
    }
  }
  return plan;
}

}  // namespace symtune::remat
