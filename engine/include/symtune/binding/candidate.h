#pragma once
// Candidate implementations of op sites (docs/binding.md, "Candidates"): each computes a site's
// function another way, says where it applies, and how closely it must agree with the ATen op as
// written (the reference every measurement compares against).

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/runtime/operator.h>

#include "symtune/binding/op_site.h"
#include "symtune/graph/op_binder.h"

namespace symtune::binding {

class Candidate {
 public:
  virtual ~Candidate() = default;
  virtual std::string name() const = 0;
  // One line for docs and the studio.
  virtual std::string description() const = 0;
  // Whether it computes `site`'s function (decided on the IR: pattern, constants).
  virtual bool applies(const OpSite& site) const = 0;
  // One execution of the site: `stack` holds the node's inputs and is left holding its outputs.
  // `op` is the node's ATen operation (for inputs it does not handle, it runs that).
  virtual void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
                   LoopFrames& loops) const = 0;
  // The largest difference from the reference it may show (outputs and input gradients, scaled
  // by the reference's largest magnitude); 0: it must agree exactly.
  virtual double tolerance() const { return 0.0; }
  // Whether `run` would run `op` on these inputs (the last siteArity(site) values of `stack`):
  // inputs its own code does not take (a training kernel's in evaluation mode, another dtype). A
  // measurement refuses it there, since timing it would time the reference against itself.
  virtual bool runsAsWritten(const OpSite& site, const torch::jit::Stack& stack) const;
  // Whether its own code runs on CPU tensors only (on others `run` runs `op`): a binder on a GPU
  // leaves it out, since measuring it there would time the reference against itself (bn-relu on
  // an H200, 2026-12-04, "won" 36 of the ResNet's 59 sites so, by noise).
  virtual bool cpuOnly() const { return false; }
  // Whether it draws its random numbers its own way (a dropout mask of its own), so that no draw
  // of it can match the reference's: a measurement then compares it, forward and backward, with
  // onOwnDraws on the same inputs and the same generator state instead of with the reference.
  virtual bool ownDraws() const { return false; }
  // The reference's ATen ops on the draws `run` makes from the generator state it is given (its
  // mask, drawn again): `stack` as for run. Only for candidates whose ownDraws is true.
  virtual void onOwnDraws(const OpSite& site, torch::jit::Operation& op,
                          torch::jit::Stack& stack) const;
};

// The ATen op as written: the reference, applicable everywhere.
inline constexpr const char* kAten = "aten";

// Every built-in candidate, the reference first.
const std::vector<std::unique_ptr<Candidate>>& builtinCandidates();
const Candidate* findCandidate(const std::string& name);

}  // namespace symtune::binding
