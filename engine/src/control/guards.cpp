#include "symtune/control/guards.h"

#include <numeric>
#include <utility>

namespace symtune::control {

namespace {

std::string joined(const std::vector<std::string>& lines) {
  return std::accumulate(lines.begin(), lines.end(), std::string(),
                         [](std::string all, const std::string& line) {
                           return all.empty() ? line : std::move(all) + "; " + line;
                         });
}

std::string budgetText(const std::string& budget) {
  return budget.empty() ? "none" : budget;
}

}  // namespace

OptimizeRequiredError::OptimizeRequiredError(OptimizeRequired required)
    : std::runtime_error("OptimizeRequired at step " + std::to_string(required.step) + ": " +
                         joined(required.reasons)),
      required_(std::move(required)) {
}

std::vector<std::string> Guards::admit(const BatchFacts& facts) {
  std::vector<std::string> broken;
  if (!started_) {
    started_ = true;
    buckets_.insert(facts.shapeBuckets.begin(), facts.shapeBuckets.end());
    budget_ = facts.budget;
    device_ = facts.device;
    return broken;
  }
  for (const std::string& bucket : facts.shapeBuckets) {
    if (buckets_.insert(bucket).second)
      broken.push_back("a new shape bucket: " + bucket + " (" +
                       std::to_string(buckets_.size() - 1) + " met before)");
  }
  if (facts.budget != budget_) {
    broken.push_back("the memory budget changed from " + budgetText(budget_) + " to " +
                     budgetText(facts.budget));
    budget_ = facts.budget;
  }
  if (facts.device != device_) {
    broken.push_back("the device changed from " + device_ + " to " + facts.device);
    device_ = facts.device;
  }
  return broken;
}

std::vector<std::string> Guards::admitBranches(const std::vector<RegionId>& taken,
                                               const std::function<std::string(RegionId)>& name) {
  const bool first = patterns_.empty();
  if (!patterns_.insert(taken).second || first)
    return {};
  std::string ids;
  for (const RegionId id : taken)
    ids += (ids.empty() ? "" : ", ") + (name ? name(id) : std::to_string(id.value()));
  return {"a new branch pattern: " + (ids.empty() ? std::string("no branch") : ids) + " ran (" +
          std::to_string(patterns_.size() - 1) + " patterns met before)"};
}

}  // namespace symtune::control
