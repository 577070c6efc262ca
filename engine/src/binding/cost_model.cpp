// DynaCompiler's cost model: binding an unseen bucket from what the table has measured.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "measurement.h"
#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"

namespace symtune::binding {

// Note [Binding cost model]
// An unseen bucket of a site is bound without measuring when the site's measured buckets settle
// it: all won by the same candidate, two or more each by at least kPredictSpeedup over the
// runner-up, or three or more each by at least kPredictSpeedupMany (more agreeing evidence asks
// for less margin: the MoE's bias GELUs win their buckets by 1.42-1.84x, three buckets each,
// and one met first at step 6 was measured there under the first rule alone). A site its own
// buckets do not settle is settled the same way by the other sites of its pattern measured in
// the very bucket (the ResNet's batch norms of one width, met in a block that a data-dependent
// gate opens for the first time late in a run), when they agree with what its own buckets, if
// any, chose; failing that, by every measured binding of its pattern in the model, in any bucket,
// when there are at least kPredictPatternWide, all won by one candidate, by kPredictSpeedupMany in
// the median and none by less than kPredictPatternFloor (the MoE's expert whose only tokens in a
// step were few enough for a bucket no expert had met; with the smallest margin as the bar, one
// bucket of ten measured at 1.23x — the measurements' noise — left such a bucket to be measured
// at step 7).
// Buckets are sizes too (bucketVolume: the elements their inputs hold at most, times the trips),
// and a margin can shrink as the size grows (a candidate that saves launches wins small shapes,
// not large ones), so a site's own buckets, and its pattern's, settle a bucket only when its size
// is within kPredictReach of the sizes they were measured at and, where those sizes differ, the
// winner's margin fitted against the size (log-log, least squares) still leaves it ahead by
// kPredictTrendMargin at this size.
// Failing all three, a close race among the siblings (Note [A close race]). Anything less
// certain — too few measurements, winners that differ, or margins below those — is measured. A
// prediction binds without the agreement check a measurement makes: it trusts that a candidate
// that agreed on the same pattern (and, but for the pattern-wide rule, shapes) agrees here.

// Note [A close race]
// Sibling sites measured in the very bucket can split their winners because their candidates
// run within the measurements' noise of each other: the ResNet's batch norm, ReLU and
// convolution regions of one width are won by bn-relu-conv, by aten and by torchscript, each a
// few per cent apart at 0.2-0.7 ms, so no winner is unanimous, and a block that a data-dependent
// gate opens for the first time at step 8 used to be measured there. Which of close candidates
// binds matters little; what a wrong guess may cost is what matters. So, where at least
// kPredictPatternWide siblings were measured in the bucket, each candidate is read as its time
// over each sibling's fastest agreeing candidate, and the mean of those — what binding it costs,
// over the fastest, a site like its siblings — decides: the candidate with the smallest mean is
// bound when that mean is within kCloseRace (5 %), it agreed wherever it was measured but on at
// most kCloseRaceRefusals of the siblings (one ResNet region in 37 refuses bn-relu-conv at 1025
// of its 36928 gradient values: one channel's input and bias gradients, as a ReLU input rounding
// across 0 gives), and, other than the ATen op, it beat the ATen op by the binder's margin in the
// median, as a measurement would have asked of it. The ResNet's regions: bn-relu-conv at a mean
// of 1.002 and 1.022 of the fastest in the two wider buckets (won 33 of 37 and 5 of 7), bound; in
// the narrowest (6 siblings, 3 won by aten, 2 by bn-relu-conv) the nearest is aten at 1.09, so a
// new one is measured. Not under a memory slack, whose winners are not the fastest
// (Note [Memory slack]).
namespace {

using detail::median;

constexpr double kPredictSpeedup = 1.5;
constexpr double kPredictSpeedupMany = 1.25;
constexpr int kPredictPatternWide = 4;
constexpr double kPredictPatternFloor = 1.1;
constexpr double kPredictReach = 8.0;
constexpr double kPredictTrendMargin = 1.1;
constexpr double kCloseRace = 1.05;
constexpr double kCloseRaceRefusals = 0.1;  // a share of the siblings

}  // namespace

const Candidate* Binder::predict(SiteState& s, const std::string& bucket) {
  // What measured bindings show: their common winner, how many, and the smallest margin over
  // a runner-up; nullopt when their winners differ.
  struct Evidence {
    std::string winner;
    int count = 0;
    double margin = std::numeric_limits<double>::infinity();  // the smallest
    std::vector<double> margins;
    // Per measured binding whose bucket has sizes: log(volume), log(margin).
    std::vector<std::pair<double, double>> sizes;
    bool settles() const {
      return (count >= 2 && margin >= kPredictSpeedup) ||
             (count >= 3 && margin >= kPredictSpeedupMany);
    }
  };
  const auto evidence = [](const std::vector<const Binding*>& bindings) -> std::optional<Evidence> {
    Evidence e;
    for (const Binding* b : bindings) {
      if (b->predicted)
        continue;
      if (!e.winner.empty() && b->winner != e.winner)
        return std::nullopt;
      e.winner = b->winner;
      const CandidateMeasurement* best = b->measurement(b->winner);
      double runnerUp = std::numeric_limits<double>::infinity();
      for (const auto& m : b->candidates) {
        if (m.name != b->winner && m.refused.empty())
          runnerUp = std::min(runnerUp, m.seconds());
      }
      const double margin =
          best != nullptr && best->seconds() > 0 ? runnerUp / best->seconds() : 0.0;
      e.margin = std::min(e.margin, margin);
      e.margins.push_back(margin);
      ++e.count;
      const auto volume = bucketVolume(b->bucket);
      if (volume && *volume > 0 && margin > 0 && std::isfinite(margin))
        e.sizes.emplace_back(std::log(*volume), std::log(margin));
    }
    return e;
  };
  // The trend rule: the winner's margin, as the measured buckets' sizes show it changing,
  // carried to this bucket's size.
  const auto volume = bucketVolume(bucket);
  const auto trendHolds = [&volume](const Evidence& e) {
    if (!volume || *volume <= 0 || e.sizes.empty())
      return true;  // no sizes to read: the rules above stand alone
    const double x = std::log(*volume);
    double lo = e.sizes.front().first, hi = lo;
    for (const auto& [v, m] : e.sizes) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (x < lo - std::log(kPredictReach) || x > hi + std::log(kPredictReach))
      return false;
    if (e.sizes.size() < 2 || hi - lo < 1e-9)
      return true;  // one size: no trend
    double mx = 0, my = 0;
    for (const auto& [v, m] : e.sizes) {
      mx += v;
      my += m;
    }
    mx /= static_cast<double>(e.sizes.size());
    my /= static_cast<double>(e.sizes.size());
    double sxy = 0, sxx = 0;
    for (const auto& [v, m] : e.sizes) {
      sxy += (v - mx) * (m - my);
      sxx += (v - mx) * (v - mx);
    }
    const double slope = sxy / sxx;
    return std::exp(my + slope * (x - mx)) >= kPredictTrendMargin;
  };
  // Note [A close race]: the candidate nearest the siblings' fastest, or "" when none is near.
  const auto closeRace = [this](const std::vector<const Binding*>& siblings,
                                const SiteState& site) -> std::string {
    std::vector<const Binding*> measured;
    for (const Binding* b : siblings) {
      if (!b->predicted)
        measured.push_back(b);
    }
    if (options_.memorySlack > 0 || static_cast<int>(measured.size()) < kPredictPatternWide)
      return "";
    std::string best;
    double bestMean = std::numeric_limits<double>::infinity();
    for (const auto& candidate : measured.front()->candidates) {
      const std::string& name = candidate.name;
      if (byName(site, name) == nullptr)
        continue;
      std::vector<double> overFastest, overAten;
      int refused = 0;
      for (const Binding* b : measured) {
        const CandidateMeasurement* m = b->measurement(name);
        const CandidateMeasurement* aten = b->measurement(b->reference);
        if (m == nullptr || aten == nullptr || !aten->refused.empty())
          continue;
        if (!m->refused.empty()) {
          ++refused;
          continue;
        }
        double fastest = std::numeric_limits<double>::infinity();
        for (const auto& c : b->candidates) {
          if (c.refused.empty())
            fastest = std::min(fastest, c.seconds());
        }
        if (fastest > 0 && aten->seconds() > 0) {
          overFastest.push_back(m->seconds() / fastest);
          overAten.push_back(m->seconds() / aten->seconds());
        }
      }
      const double tried = static_cast<double>(overFastest.size()) + refused;
      if (static_cast<int>(overFastest.size()) < kPredictPatternWide ||
          refused > kCloseRaceRefusals * tried)
        continue;
      if (name != measured.front()->reference && median(overAten) > 1.0 - options_.margin)
        continue;
      double mean = 0;
      for (double r : overFastest)
        mean += r / static_cast<double>(overFastest.size());
      if (mean < bestMean) {
        bestMean = mean;
        best = name;
      }
    }
    return bestMean <= kCloseRace ? best : "";
  };
  // Evaluation buckets are read from evaluation buckets only, training ones from training ones
  // (Note [Evaluation buckets] in binder.cpp).
  const bool evaluation = isEvaluationBucket(bucket);
  const auto sameMode = [evaluation](const Binding& b) {
    return isEvaluationBucket(b.bucket) == evaluation;
  };
  std::vector<const Binding*> ownBindings;
  for (const Binding* b : table_.ofSite(s.site.name)) {
    if (sameMode(*b))
      ownBindings.push_back(b);
  }
  const auto own = evidence(ownBindings);
  if (!own || (own->settles() && !trendHolds(*own)))
    return nullptr;
  std::string winner = own->winner;
  if (!own->settles()) {
    // Not enough of its own: other sites of its pattern measured in this bucket.
    std::vector<const Binding*> siblings;
    for (const Binding& b : table_.bindings) {
      if (b.pattern == s.site.pattern && b.bucket == bucket && b.site != s.site.name)
        siblings.push_back(&b);
    }
    const auto bySiblings = evidence(siblings);
    // Or, failing those, every measured site of its pattern, in any bucket (kPredictPatternWide).
    std::vector<const Binding*> pattern;
    for (const Binding& b : table_.bindings) {
      if (b.pattern == s.site.pattern && sameMode(b))
        pattern.push_back(&b);
    }
    const auto byPattern = evidence(pattern);
    const auto agrees = [&winner](const std::string& other) {
      return winner.empty() || other == winner;
    };
    if (bySiblings && bySiblings->settles() && agrees(bySiblings->winner)) {
      winner = bySiblings->winner;
    } else if (byPattern && byPattern->count >= kPredictPatternWide &&
               byPattern->margin >= kPredictPatternFloor &&
               median(byPattern->margins) >= kPredictSpeedupMany && agrees(byPattern->winner) &&
               trendHolds(*byPattern)) {
      winner = byPattern->winner;
    } else {
      // Nor that: a close race among the siblings.
      const std::string close = closeRace(siblings, s);
      if (close.empty() || !agrees(close))
        return nullptr;
      winner = close;
    }
  }
  const Candidate* c = byName(s, winner);
  if (c == nullptr)
    return nullptr;
  Binding b = detail::siteBinding(s.site, bucket);
  b.winner = winner;
  b.predicted = true;
  put(std::move(b), s);
  ++predictions_;
  return c;
}

}  // namespace symtune::binding
