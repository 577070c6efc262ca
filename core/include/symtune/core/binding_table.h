#pragma once
// DynaCompiler's binding table (docs/binding.md): for each op site of a model and each shape
// bucket met there, the candidate implementations measured on the real inputs, their times, and
// the one bound. Data only, with no LibTorch: the engine's binder fills it, a session keeps it in
// a file beside it, and the report, the attach stream and the studio's binding dock read it.
//
//   symtune::BindingTable table = symtune::BindingTable::load("run.bindings.json");
//   if (auto why = table.refusal(symtune::MachineFingerprint{...}, "tagger:3f2a…"))
//     ... // measured elsewhere or for another model: measure again
//   const symtune::Binding* b = table.find("#31 aten::select rnn", "float32 [32,<=64,768] x<=64");

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace symtune {

// The kind of machine a table was measured on. A table is reused only on an equal fingerprint.
struct MachineFingerprint {
  std::string cpu;       // ATen's CPU capability: "AVX512", "AVX2", "DEFAULT"
  int threads = 0;       // intra-op threads
  std::string gpu;       // the CUDA device's name; empty when the run is on the CPU
  std::string libtorch;  // "2.11.0"

  bool operator==(const MachineFingerprint& o) const {
    return cpu == o.cpu && threads == o.threads && gpu == o.gpu && libtorch == o.libtorch;
  }
  bool operator!=(const MachineFingerprint& o) const { return !(*this == o); }
  // "AVX2, 2 threads, no GPU, LibTorch 2.11.0"
  std::string describe() const;
};

// One candidate's measurement at a (site, bucket): forward and backward over the site's
// executions in one step (a loop-indexed site: every trip), medians of the repetitions.
struct CandidateMeasurement {
  std::string name;
  double forwardSeconds = 0;
  double backwardSeconds = 0;
  // The largest difference from the reference (outputs and input gradients), scaled by the
  // reference's largest magnitude; `refused` is set when it passes the candidate's tolerance.
  double maxError = 0;
  std::string refused;  // why it may not be bound; empty when it agrees with the reference
  // The bytes live after its forward that were not before it: its outputs and what it keeps for
  // the backward (CPU runs, by the allocation counter); -1 when not measured.
  int64_t keptBytes = -1;

  double seconds() const { return forwardSeconds + backwardSeconds; }
};

struct Binding {
  std::string site;   // "#31 aten::select rnn": node id, op, module path
  int32_t node = -1;  // the node's id in the model's graph
  // The site's other nodes, for a site of several (a bias add's GELU, a loop's reads and write
  // of a tensor): what the studio's overlay colours with it. Empty for a one-node site.
  std::vector<int32_t> nodes;
  std::string pattern;  // "identity slice", "loop-indexed select", ...
  std::string bucket;   // "float32 [32,<=64,768] x<=64": dtype, bucketed shapes, loop trips
  std::vector<CandidateMeasurement> candidates;  // empty when the cost model predicted it
  std::string reference;                         // the ATen op as written ("aten")
  std::string winner;
  bool predicted = false;  // chosen by the cost model from the site's other buckets

  // The reference's time over the winner's (1 when either was not measured).
  double speedup() const;
  const CandidateMeasurement* measurement(const std::string& candidate) const;
};

class BindingTable {
 public:
  MachineFingerprint machine;
  // The model's graph fingerprint, "<name>:<hash of its ops>"; tables match on the hash.
  std::string model;
  // The memory slack the winners were chosen with (BinderOptions::memorySlack, docs/binding.md,
  // "Memory slack"): a table is reused only under the same.
  double memorySlack = 0;
  std::vector<Binding> bindings;

  const Binding* find(const std::string& site, const std::string& bucket) const;
  // Adds `binding`, replacing the one at the same (site, bucket).
  void put(Binding binding);
  // Every binding of `site`, in the order they were added.
  std::vector<const Binding*> ofSite(const std::string& site) const;

  // Why this table may not be used for `model` on `machine` (measured on another kind of machine
  // or for another model); nullopt when it may.
  std::optional<std::string> refusal(const MachineFingerprint& machine,
                                     const std::string& model) const;

  std::string toJson() const;
  // Throws std::runtime_error naming `origin` and the field that is wrong.
  static BindingTable fromJson(const std::string& text, const std::string& origin);
  // Atomically (atomic_file.h); throws std::runtime_error with the path and the reason.
  void save(const std::string& path) const;
  static BindingTable load(const std::string& path);

  // A table per site and bucket for a terminal: winner, speedup, candidates with their times.
  std::string describe() const;
};

}  // namespace symtune
