#pragma once
// CUDA-graph candidates (docs/binding.md, "Candidates").
//
// Note [Graphed sites]
// On a GPU, a site whose rows can be padded (Note [Padded buckets] in padding.h) can run as
// captured CUDA graphs, one set per padded shape: "cuda-graph:<inner>" runs `inner` (the ATen ops
// as written, or a fused kernel) on inputs padded to their bucket's rows, so one capture serves
// every row count of the bucket, and the site's launches — a GRU cell's dozen elementwise ops and
// their backward's twenty — become one graph launch each way.
//
// Each padded shape has a forward graph, from static inputs to a static output, and a backward
// graph that recomputes the forward from the same static inputs and differentiates it against a
// static output gradient. (A site in a loop runs every trip before its first backward; a backward
// graph replaying the forward's saved tensors would see only the last trip's.) An execution
// copies its padded inputs into the static ones (the padding rows filled again), replays the
// forward and clones the output's real rows; its backward copies the inputs it saved and the
// output's gradient in, replays, and clones the real rows of the inputs' gradients. Inputs that
// are not padded (a bias, a weight) have static buffers too, copied into only when the input is
// another tensor, a new version of the last one, or the first execution of a forward
// (newForward(): an update written through .data() leaves the version as it was): once per step for
// a parameter that a loop reads every trip, and no graph depends on where a caller's tensor lives.
//
// A shape is captured the first time it is met: two untimed runs forward and back on the
// device's capture stream (cuBLAS's handles and workspaces, the autograd device thread), then
// the captures, the device synchronised around them. Whether an input wants a gradient is read
// from the inputs before padding and is part of the key. A site that fails to capture (an op that
// waits for the host) — its capture let go: the stream, the allocator's pool and the generators
// out of capture mode — or meets more than kMaxGraphedShapes keys runs `inner` without a graph
// from then on, and says so once on stderr. Graphs are kept per site name, so a measurement's
// captures serve the run.

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

inline constexpr const char* kCudaGraphPrefix = "cuda-graph:";
inline constexpr int kMaxGraphedShapes = 16;

// Whether this build can capture CUDA graphs (LibTorch with CUDA, SYMTUNE_WITH_CUDA).
bool cudaGraphsBuilt();

// "cuda-graph:<inner>": applies where `inner` does and the site can be padded; inputs not on a
// GPU run `inner` as it is. nullptr in a build without CUDA.
std::unique_ptr<Candidate> makeCudaGraphed(std::shared_ptr<const Candidate> inner);

// A forward begins (Binder::bindInputs): the static copies of inputs that are not padded are made
// again at their next execution.
void newForward();

}  // namespace symtune::binding
