#pragma once
// What recomputing a plan's units costs: shared by the rematerializer's sources. Private to
// engine/src/remat/.

#include <string>
#include <vector>

#include "symtune/remat/planner.h"

namespace symtune::remat {

// What recomputing the units `plan` names costs.
inline double costOf(const std::vector<RematUnit>& units, const SegmentPlan& plan) {
  double cost = 0;
  for (const auto& name : plan.recompute) {
    if (const auto share = shareOf(units, name))
      cost += share->cost;
  }
  return cost;
}

}  // namespace symtune::remat
