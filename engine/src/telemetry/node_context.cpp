#include "symtune/telemetry/node_context.h"

#include <algorithm>

namespace symtune {

namespace {
thread_local NodeId tCurrentNode;
}

NodeId currentNode() {
  return tCurrentNode;
}

CurrentNodeScope::CurrentNodeScope(NodeId node) : previous_(tCurrentNode) {
  tCurrentNode = node;
}

CurrentNodeScope::~CurrentNodeScope() {
  tCurrentNode = previous_;
}

void SequenceOwners::add(uint64_t begin, uint64_t end, NodeId node) {
  if (end <= begin)
    return;
  const auto at =
      std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                       [](uint64_t b, const auto& range) { return b < std::get<0>(range); });
  ranges_.emplace(at, begin, end, node);  // the evaluator's ranges come in order: at == end()
}

void SequenceOwners::merge(const SequenceOwners& other) {
  for (const auto& [begin, end, node] : other.ranges_)
    add(begin, end, node);
}

NodeId SequenceOwners::ownerOf(uint64_t sequenceNr) const {
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), sequenceNr,
                       [](uint64_t seq, const auto& range) { return seq < std::get<0>(range); });
  if (it == ranges_.begin())
    return {};
  --it;  // the last range that begins at or before sequenceNr
  return sequenceNr < std::get<1>(*it) ? std::get<2>(*it) : NodeId();
}

}  // namespace symtune
