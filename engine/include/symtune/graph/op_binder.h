#pragma once
// The hook through which DynaCompiler's binder (symtune/binding/binder.h) runs op sites of
// SyMuGen's evaluator another way than the IR's ATen op (Note [Op sites]).

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "symtune/core/ids.h"

namespace symtune {

// Note [Op sites]
// An op site is an operator node of the inlined IR that the binder may run with another
// implementation of the same function. The evaluator asks the binder once per node whether it is
// a site (OpBinder::binds) and then hands it every execution of the node: the node's inputs on a
// stack, exactly as the ATen operation would receive them, to be replaced by its outputs. The
// binder picks the implementation for the inputs' shape bucket and runs it inside the node's
// scope, so per-node telemetry, autograd sequence numbers and NVTX ranges attribute its work to
// the node as they would the op's. An implementation that does part of its work once per loop
// execution (an unbind hoisted out of a loop whose counter indexes the tensor) keeps it in the
// loop's frame (LoopFrames), which the evaluator drops when that execution of the loop ends.

// The running executions of the loops around a node, with a slot per site for what a site's
// implementation computes once per loop execution.
class LoopFrames {
 public:
  void enter(const torch::jit::Node* loop, int64_t maxTrips) { frames_[loop].maxTrips = maxTrips; }
  void leave(const torch::jit::Node* loop) { frames_.erase(loop); }
  // The running loops and their trip bounds, without what their sites keep per execution.
  LoopFrames tripsOnly() const {
    LoopFrames out;
    for (const auto& [loop, frame] : frames_)
      out.frames_[loop].maxTrips = frame.maxTrips;
    return out;
  }
  // The trip bound of the running execution of `loop` (its first input); -1 when not running.
  int64_t maxTrips(const torch::jit::Node* loop) const {
    auto it = frames_.find(loop);
    return it == frames_.end() ? -1 : it->second.maxTrips;
  }
  // The slot of `key` (a site's node, or what else its user keeps once per loop execution) in the
  // running execution of `loop` (None until set). The loop must be running.
  c10::IValue& slot(const torch::jit::Node* loop, const void* key) {
    auto it = frames_.find(loop);
    TORCH_INTERNAL_ASSERT(it != frames_.end(), "LoopFrames: the loop is not running");
    return it->second.slots[key];
  }

 private:
  struct Frame {
    int64_t maxTrips = 0;
    std::unordered_map<const void*, c10::IValue> slots;
  };
  std::unordered_map<const torch::jit::Node*, Frame> frames_;
};

class OpBinder {
 public:
  virtual ~OpBinder() = default;
  // Whether it runs `node` (an operator node; `id` its graph node, invalid for nodes the static
  // graph does not show). Asked on the node's first execution in each forward.
  virtual bool binds(const torch::jit::Node* node, NodeId id) = 0;
  // One execution of a node it binds: `stack` holds the node's inputs and is left holding its
  // outputs, as for the node's torch::jit::Operation.
  virtual void run(const torch::jit::Node* node, torch::jit::Stack& stack, LoopFrames& loops) = 0;
  // After run(): the result of an earlier node of the same block that this execution computed in
  // its place (that node left an undefined tensor, which nothing has read since), for the
  // evaluator to store as that value; nullopt when there is none.
  virtual std::optional<std::pair<const torch::jit::Value*, c10::IValue>> takeLateOutput() {
    return std::nullopt;
  }
};

}  // namespace symtune
