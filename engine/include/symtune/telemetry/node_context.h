#pragma once
// How an op finds its symtune::Graph node, and so its module path and source line, without any
// lookup by name:
// - a forward op: SyMuGen's evaluator publishes the node whose operator it calls on this thread
//   (CurrentNodeScope); OpTracer reads it when the op starts;
// - an autograd function: it carries the sequence number its forward op was given, and the
//   evaluator notes which node handed out which numbers (SequenceOwners).

#include <cstdint>
#include <tuple>
#include <vector>

#include "symtune/core/ids.h"

namespace symtune {

// The node published on this thread; none outside the evaluator.
NodeId currentNode();

class CurrentNodeScope {
 public:
  explicit CurrentNodeScope(NodeId node);
  ~CurrentNodeScope();
  CurrentNodeScope(const CurrentNodeScope&) = delete;
  CurrentNodeScope& operator=(const CurrentNodeScope&) = delete;

 private:
  NodeId previous_;
};

// Which forward node handed out each autograd sequence number during one run of the evaluator.
class SequenceOwners {
 public:
  // Numbers [begin, end) came from `node`. Ranges of one run do not overlap.
  void add(uint64_t begin, uint64_t end, NodeId node);
  NodeId ownerOf(uint64_t sequenceNr) const;
  bool empty() const { return ranges_.empty(); }
  // Adds another run's ranges (a later forward of the same step: its numbers come after these).
  void merge(const SequenceOwners& other);

 private:
  std::vector<std::tuple<uint64_t, uint64_t, NodeId>> ranges_;  // by begin
};

}  // namespace symtune
