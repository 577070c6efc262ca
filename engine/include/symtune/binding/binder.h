#pragma once
// DynaCompiler's binder: binds each op site of a model, per shape bucket, to the fastest
// candidate that agrees with the ATen op (docs/binding.md).
//
//   auto binder = std::make_shared<symtune::binding::Binder>(
//       gen.staticGraph(), symtune::binding::currentMachine(device));
//   binder->adopt(symtune::BindingTable::load("tagger.bindings.json"));  // an earlier run's
//   symtune::ForwardOptions options;
//   options.binder = binder.get();
//   gen.forward(inputs, options);  // new (site, bucket)s are measured, then bound
//   binder->table().save("tagger.bindings.json");
//
// Note [Lazy binding]
// The first time a site meets a bucket, the binder runs every applicable candidate on the real
// inputs (detached copies as leaves, so the measurement touches neither the model's autograd
// graph nor its parameters' gradients): the site's executions in one step (each trip of a
// loop-indexed site's loop), forward, then backward against fixed random output gradients;
// BinderOptions::repetitions times, candidates taking turns, medians. A candidate whose outputs
// or input gradients differ from the reference's by more than its tolerance, or that throws, is
// refused and reported. The fastest of the rest is bound if it beats the reference by
// BinderOptions::margin; the table keeps every candidate's times. Later executions in the bucket
// look the choice up and measure nothing. Before measuring an unseen bucket, the cost model
// (predict()) may bind it from the site's other buckets.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/Device.h>

#include "symtune/binding/candidate.h"
#include "symtune/core/binding_table.h"
#include "symtune/core/graph.h"
#include "symtune/graph/op_binder.h"

namespace symtune::binding {

namespace detail {
class KeptRandomState;  // measurement.h
}  // namespace detail

struct BinderOptions {
  // Measure a (site, bucket) that neither the table nor the cost model settles; false: run the
  // reference there.
  bool measure = true;
  // The most (site, bucket)s it measures; when spent, it behaves as with `measure` false. -1: no
  // limit.
  int64_t budget = -1;
  int repetitions = 3;  // timed runs per candidate, after one untimed run
  // A candidate other than the reference is bound only when it is this much faster (0.03: 3 %).
  double margin = 0.03;
  // Let the cost model bind an unseen bucket without measuring (Note [Binding cost model]).
  bool predict = true;
  std::vector<std::string> disable;  // candidates never bound (by name)
  // Only candidates with tolerance 0 (bit for bit); no image-input site.
  bool exact = false;
  // The share of the sites' time (bound by time) that may go to candidates keeping less for the
  // backward, the trades saving most bytes per second first (0.1: 10 %; Note [Memory slack] in
  // measurement.cpp); 0: by time alone. Above 0 the binder also looks for regions whose
  // candidates only save memory (kConvBlockPair). A table is reused only under the slack it was
  // measured with. In [0, 1).
  double memorySlack = 0;
  // Candidates besides the built-in ones (a plugin's, a test's), tried after them.
  std::vector<std::shared_ptr<const Candidate>> extra;
};

// Note [Image input format]
// A model that convolves 4-d float inputs can run channels-last (NHWC) end to end: ATen's
// convolutions, batch norms, pooling and elementwise ops give their result the format of their
// input, so converting the model's image inputs once is enough for every convolution after them
// to take oneDNN's channels-last path (on this project's CPU 1.2x faster over the ResNet's step
// in PyTorch eager as here). What that is worth shows only over the whole model — one convolution
// measured alone pays the conversion and gained or lost up to 5 % (tried and dropped) — so this
// site is the model's inputs: the first forward of a bucket replays the whole forward and backward
// (ModelReplay) with the inputs as they are and channels-last, checks that outputs and parameter
// gradients agree within kImageFormatTolerance, and keeps the faster, as for an op site. Ops that
// write a fresh tensor (index_select, cat) go back to NCHW; the measurement sees that too.
inline constexpr const char* kImageInputs = "image inputs";  // the site, and its pattern
inline constexpr const char* kChannelsLast = "channels-last";
// Convolutions in another memory format sum in another order.
inline constexpr double kImageFormatTolerance = 1e-4;
// A whole-model decision, measured over steps whose time moves by a few per cent: at least this
// many timed runs each way, and channels-last kept only when this much faster (with the op
// sites' 3 runs and 3 %, early_exit went channels-last in 2 of 3 rounds for no gain).
inline constexpr int kImageFormatRepetitions = 5;
inline constexpr double kImageFormatMargin = 0.05;

// What measuring a whole-model site needs: the model's forward without the binder, the
// parameters whose gradients are compared, and the buffers a training forward updates (running
// statistics), put back afterwards.
struct ModelReplay {
  std::function<at::Tensor(const std::vector<c10::IValue>&)> forward;
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> buffers;
};

// The kind of machine the binder measures on: ATen's CPU capability, intra-op threads, the GPU
// (when `device` is a CUDA device) and LibTorch's version.
MachineFingerprint currentMachine(const c10::Device& device);

// "<graph name>:<hash of its nodes' kinds and module paths>": which model a table belongs to.
std::string graphFingerprint(const Graph& graph);

class Binder final : public OpBinder {
 public:
  // `graph`: SyMuGen's static graph of the model (site names, fingerprint); must outlive it.
  Binder(const Graph& graph, MachineFingerprint machine, BinderOptions options = {});

  // Starts from `table` (an earlier run's) when it was measured for this model on this kind of
  // machine: its bindings are used without measuring. Otherwise returns why not and keeps its
  // own table.
  std::optional<std::string> adopt(BindingTable table);

  // Note [What a region holds]
  // A region's nodes note the values they read for its last node (Note [Cell sites]) only when
  // the last node will read them: a bound candidate computes the result from them, or the bucket
  // is measured there. A region that runs as written notes nothing. An execution that never
  // reaches its last node — a block a plan recomputes holding the region's first part only, or a
  // forward that ran out of its remat budget — lets go of what it noted when the next forward
  // begins (bindInputs): held on, the noted activations kept their autograd graphs alive, and a
  // bound early exit that ran out of its budget on its first attempt began the next with 4.8 to
  // 11 MB of the failed one still live (of a 11.7 MB budget), so every retry ran out too.
  //
  // The model's inputs as the image-input site binds them (Note [Image input format]): nullopt
  // when they stay as they are. `model` is asked for only when a bucket is measured. Called at
  // the start of every forward, it first spends the memory slack on what the forwards before
  // measured (Note [Memory slack] in measurement.cpp): winners chosen by time alone until then.
  std::optional<std::vector<c10::IValue>> bindInputs(const std::vector<c10::IValue>& inputs,
                                                     const std::function<ModelReplay()>& model);

  // The trainer's loss of `logits` against class `target`s (the loss site: the mean
  // cross-entropy, ATen's or kernels' fused one, bound per bucket as the op sites are).
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& target);

  bool binds(const torch::jit::Node* node, NodeId id) override;
  void run(const torch::jit::Node* node, torch::jit::Stack& stack, LoopFrames& loops) override;
  std::optional<std::pair<const torch::jit::Value*, c10::IValue>> takeLateOutput() override;

  const BindingTable& table() const { return table_; }
  const BinderOptions& options() const { return options_; }
  // Whether a (site, bucket) that neither the table nor the cost model settles is measured when
  // met (the configuration's binding_explore knob, docs/control.md). While not, it runs the
  // reference; once exploring again, the choices so made are decided anew (and measured).
  void setExploring(bool exploring);
  bool exploring() const { return exploring_; }
  // Whether a choice made for want of exploring waits to be decided anew (setExploring(true)).
  bool deferred() const { return deferred_; }
  // The times an unsettled (site, bucket) was met while the budget allowed a measurement: what
  // exploring decides. A step in which this stays put ran alike exploring or not.
  int64_t unsettledMet() const { return unsettledMet_; }
  // Note [A budget widens the slack]
  // The slack is a preference priced by measured times; a remat budget is a limit. What a slack
  // buys moves with the measurements (early exit's 0.1 took the second stage's pair run again in
  // most trainers, 9.8 MB, and not in one, 12.1 MB), and a step no plan fits used to let the
  // binder go and run unbound, where nothing fits (16.4 MB against early exit's 11.7). So under
  // a budget no plan fits, a step the trainer cannot split further widens the slack before the
  // binder is let go (one it can split splits, as before, keeping the figures of the runs that
  // split, the tagger's and the tree network's, as measured): doubled (to
  // kWidestMemorySlack at most), the winners chosen again from the table's measurements at the
  // next forward, nothing measured anew (Trainer::runPlanned, which also has the remat predictor
  // forget the peaks of the former choices). False, and nothing changed, at the widest, or where
  // the binder has no slack: without one it never looked for the regions that only save memory,
  // so the trainer puts in its place a binder with kFirstMemorySlack given its table, which finds
  // them and measures only them. The table records the slack it now binds by.
  bool widenMemorySlack();
  static constexpr double kFirstMemorySlack = 0.05;
  static constexpr double kWidestMemorySlack = 0.5;
  // The sites found so far (nodes executed at least once), in the order found.
  std::vector<OpSite> sites() const;
  // (site, bucket)s measured, and bound by the cost model, since construction.
  int64_t measurements() const { return measurements_; }
  // Those, and the executions run as written to note their inputs for a measurement to come
  // (a loop-carried rows group's first in a bucket): a forward that moves it holds what a forward
  // in the steady state does not (Note [Steps the binder settles in] in rematerializer.h).
  int64_t settling() const { return measurements_ + noted_; }
  int64_t predictions() const { return predictions_; }
  // Site executions run by a candidate other than the reference.
  int64_t boundExecutions() const { return boundExecutions_; }

  // Note [Runs recomputed bound]
  // A run of ops recomputed in the backward runs its nodes again in an evaluator of its own, the
  // binder binding them as in the forward (the trips of the loops around it passed on, so each
  // site finds its bucket). That is the forward's function only where none of the run's sites
  // depends on nodes outside the run: a two-node site, a cell region and a slice group decide at
  // one node and compute at another, so a run must hold all of such a site's nodes or none; a
  // loop-carried rows group shares one buffer across its loop's trips, and a matmul-bias region
  // in a loop that may compute every trip's projection at once keeps it in the loop's frame, so a
  // run holds none of their nodes. The nodes the binder has not met yet (a branch not taken so
  // far) it cannot say anything of. A loop recomputed trip by trip is such a run of its body.
  struct RecomputeLimits {
    std::vector<std::vector<int32_t>> whole;  // node ids a run holds all of or none of
    std::set<int32_t> never;                  // node ids a run holds none of
    std::set<int32_t> met;                    // the node ids it has been asked about
  };
  RecomputeLimits recomputeLimits() const;
  // How many nodes it has been asked about: recomputeLimits() changes only when this does.
  size_t nodesMet() const { return met_.size(); }

  // What the plan of the next forwards recomputes (SegmentExecutor, which says so before each
  // forward): its top-level blocks, and whether it also recomputes runs of ops or loops. A cell
  // region with nodes both inside and outside one of those blocks runs as written, and so does
  // every batch norm, ReLU and convolution region under a plan with runs or loops (Note [Regions
  // split by a recomputed unit] in engine/src/exec/segment_executor.cpp). A region decides at its
  // first node and computes at its last, so a checkpoint between them would lose what it noted.
  void setRecomputed(std::set<std::string> blocks, bool runsOrLoops);

 private:
  struct SiteState {
    OpSite site;
    torch::jit::Operation op;
    std::vector<const Candidate*> candidates;                  // applicable, the reference first
    std::unordered_map<std::string, const Candidate*> chosen;  // by bucket
    // The last execution's exact shapes (signature()) and its candidate: executions with the
    // same shapes as the one before skip the bucket's key.
    std::vector<int64_t> lastSignature;
    const Candidate* last = nullptr;
    // The second node of a two-node site: passes on its input (Note [Two-node sites]).
    bool passOn = false;
    // A node of a cell site (Note [Cell sites]): the region it belongs to. Its own site, if it
    // is one, is `site` as for any node; otherwise `op` is its ATen op.
    const CellRegion* region = nullptr;
  };

  // A cell site: its table entry, its choices, and what the running execution has noted.
  struct CellState {
    std::unique_ptr<SiteState> lead;  // the site (node: the region's first), its reference op
    std::unordered_map<std::string, const Candidate*> chosen;
    std::vector<int64_t> lastSignature;
    const Candidate* last = nullptr;
    const Candidate* active = nullptr;  // this execution's
    std::vector<c10::IValue> noted;     // the region's inputs, as its nodes are given them
    std::string pending;                // a bucket its last node measures; empty: none
    // With a measurement pending, the random state as the region began: its nodes run as written
    // draw from it, and the winner draws from it again (Note [A measured region draws as a bound
    // one] in binder_cells.cpp).
    std::shared_ptr<const detail::KeptRandomState> began;
  };

  const Candidate* decide(SiteState& s, const std::string& bucket, const torch::jit::Stack& stack,
                          int64_t trips);
  // Whether an unsettled (site, bucket) may be measured now (the options, the budget, exploring);
  // notes one left unmeasured for want of exploring.
  bool mayMeasure();
  // Forgets every bucket's choice (they are looked up again, in the table first).
  void forgetChoices();
  // With a memory slack, the table's winners rechosen when something was measured since the
  // last time (slackDue_), and the choices forgotten where one changed.
  void spendMemorySlack();
  // One execution of a node's own site (or of its ATen op when it is only a cell's node).
  void runSite(SiteState& s, const torch::jit::Node* node, torch::jit::Stack& stack,
               LoopFrames& loops);
  // One execution of `s` by the candidate its bucket binds (decided on first meeting it): the
  // top `count` values of `stack` are its inputs.
  void runChosen(SiteState& s, torch::jit::Stack& stack, size_t count, int64_t trips,
                 LoopFrames& loops);
  // Cell sites (Note [Cell sites]): finds the regions of `graph` once; the state of `region`
  // (made on first use, its site named after the region's first node, whose id is `id`); one
  // execution of a region's node.
  void findCells(const torch::jit::Graph& graph);
  CellState& cellState(const std::shared_ptr<CellRegion>& region, NodeId id);
  void runCell(SiteState& s, const torch::jit::Node* node, torch::jit::Stack& stack,
               LoopFrames& loops);
  // The cell's choice for the execution its first node begins with `stack`.
  const Candidate* chooseCell(CellState& cs, const torch::jit::Stack& stack, size_t count);
  const Candidate* predict(SiteState& s, const std::string& bucket);
  Binding measure(SiteState& s, const std::string& bucket, const torch::jit::Stack& stack,
                  int64_t trips);
  const Candidate* byName(const SiteState& s, const std::string& name) const;
  // The candidates that apply to `site` and are not disabled, the reference first.
  std::vector<const Candidate*> applicableTo(const OpSite& site) const;
  // Puts a binding of `s` into the table with the ids of the site's other nodes seen so far
  // (Binding::nodes); noteMember adds a node's id when it is first run, to bindings made before.
  void put(Binding b, const SiteState& s);
  void noteMember(const void* key, NodeId id);
  // What identifies a site of several nodes: its rows group, or its first node.
  static const void* siteKey(const SiteState& s);
  // Notes a partial slice's execution in its group; whether the group's ranges can split its
  // tensor (otherwise nothing is decided yet).
  bool observeSlice(SiteState& s, const torch::jit::Stack& stack);
  // Into signature_: every tensor input's dtype, device, sizes and requires_grad, the trips, the
  // grad mode and whether the site evaluates (its modeInputs).
  void signature(const OpSite& site, const torch::jit::Stack& stack, size_t count, int64_t trips);
  // The execution's bucket: bucketKey, and " eval" where the site evaluates (Note [Evaluation
  // buckets] in binder.cpp).
  static std::string siteBucket(const OpSite& site, const torch::jit::Stack& stack, size_t count,
                                int64_t trips);

  // Loop-carried rows (Note [Loop-carried rows]): the first node of the group an execution of its
  // loop runs decides for the whole execution, kept in the loop's frame.
  void runRows(SiteState& s, torch::jit::Stack& stack, LoopFrames& loops);
  // The candidate (index into s.candidates) for an execution entered with `entry`; -1: run as
  // written and record it for a later measurement.
  int64_t chooseRows(SiteState& s, const at::Tensor& entry, int64_t trips);
  Binding measureRows(SiteState& s, const std::string& bucket, int64_t trips);

  Binding measureImageFormat(const std::vector<c10::IValue>& inputs, const ModelReplay& model,
                             const std::string& bucket);

  const Graph& graph_;
  BinderOptions options_;
  // The built-in candidates as CUDA graphs, on a GPU machine (Note [Graphed sites]).
  std::vector<std::shared_ptr<const Candidate>> graphed_;
  // The image-input site: the first convolution of the forward graph (none: no such site), and
  // each bucket's choice.
  std::optional<NodeId> firstConvolution_;
  std::unordered_map<std::string, bool> channelsLast_;
  BindingTable table_;
  std::unordered_map<const torch::jit::Node*, std::unique_ptr<SiteState>> states_;
  SiteGroups groups_;
  // The node ids of each site of several nodes (by siteKey), and the site names its bindings
  // were put under.
  std::unordered_map<const void*, std::vector<int32_t>> members_;
  std::unordered_map<const void*, std::set<std::string>> leads_;
  // Each loop-carried rows group's choices by bucket (index into its first node's candidates).
  std::unordered_map<const CarriedRows*, std::unordered_map<std::string, int64_t>> rowsChosen_;
  std::vector<const SiteState*> order_;
  // Cell sites: the graphs searched, each region's nodes, and each region's state.
  std::set<const torch::jit::Graph*> searched_;
  std::unordered_map<const torch::jit::Node*, std::shared_ptr<CellRegion>> cellOf_;
  std::unordered_map<const CellRegion*, CellState> cells_;
  std::unique_ptr<SiteState> loss_;  // the loss site, made on first use
  std::vector<int64_t> signature_;
  int64_t measurements_ = 0;
  bool slackDue_ = false;  // put() since spendMemorySlack()
  int64_t noted_ = 0;      // settling()'s executions run as written to be noted
  bool exploring_ = true;
  bool deferred_ = false;  // a (site, bucket) went unmeasured for want of exploring
  int64_t unsettledMet_ = 0;
  int64_t predictions_ = 0;
  int64_t boundExecutions_ = 0;
  std::set<int32_t> met_;                   // the node ids binds() was asked about
  std::set<std::string> recomputedBlocks_;  // setRecomputed
  bool recomputesRuns_ = false;
  // Per region met under recomputedBlocks_: whether one of them splits it.
  std::unordered_map<const CellRegion*, bool> split_;
  bool splitByRecomputedBlock(const CellRegion& region);
  // What the last run computed for an earlier node (a region's alsoOut), until taken.
  std::optional<std::pair<const torch::jit::Value*, c10::IValue>> late_;
};

}  // namespace symtune::binding
