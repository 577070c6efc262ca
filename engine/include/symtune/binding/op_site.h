#pragma once
// The op sites DynaCompiler can bind (Note [Op sites] in symtune/graph/op_binder.h): operator
// nodes of SyMuGen's inlined IR that match a pattern some candidate implementation computes.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include <torch/csrc/jit/ir/ir.h>

#include "symtune/core/graph.h"

namespace symtune::binding {

// Patterns (docs/binding.md, "Sites").
// A full-range aten::slice: start 0 or None, end None, step 1 — TorchScript writes one for every
// `:` in an index (`x[:, t]`), and its backward fills a zero gradient the size of the whole
// tensor to copy the gradient into.
inline constexpr const char* kIdentitySlice = "identity slice";
// aten::select(x, dim, i) where i is the counter of a loop around it and x does not change in
// that loop (`gi_all[:, t]` over time steps, `self.w1[e]` over experts, `self.w_qkv[l]` over
// layers): every trip's backward fills a zero gradient the size of x.
inline constexpr const char* kLoopIndexedSelect = "loop-indexed select";

// aten::slice of a part of a tensor (`gi[:, :hid]`, `gi[:, hid:2 * hid]`, `gi[:, 2 * hid:]`)
// when other such slices read the same tensor along the same dimension (seen through identity
// slices): each one's backward fills a zero gradient the size of the whole tensor; one split
// serving them all has one backward that concatenates the parts' gradients.
inline constexpr const char* kPartialSlice = "partial slice";

// aten::add(x, b, 1) whose result feeds only an aten::gelu in the same block (`F.gelu(x @ w + b)`,
// a linear layer's bias and its GELU): one site of two nodes (Note [Two-node sites]).
inline constexpr const char* kBiasGelu = "bias GELU";

// aten::batch_norm whose result feeds only an aten::relu in the same block (a convolution block's
// normalization and activation): one site of two nodes (Note [Two-node sites]).
inline constexpr const char* kBatchNormRelu = "batch norm ReLU";

// A tensor carried through a loop whose body reads rows of it with aten::index_select and then
// replaces rows of it with one aten::index_copy whose result is the next trip's value (the tree
// network's `h.index_select(0, left[ids])` ... `h = h.index_copy(0, ids, composed)`), or adds
// rows to it with one aten::index_add, possibly inside an if whose other branch passes it on
// (the MoE's `out = out.index_add(0, rows, expert)` for each expert that has tokens): one site of
// every such node of the loop (Note [Loop-carried rows]).
inline constexpr const char* kCarriedRows = "loop-carried rows";
// A tensor defined outside a loop that the loop reads only with aten::index_select (at any depth
// of its body: the MoE's `y.index_select(0, rows)` per expert, inside an `if`): one site of
// every such read (Note [Loop-carried rows]; no write, so no copy of the tensor).
inline constexpr const char* kInvariantRows = "loop-invariant rows";

// The gates of a GRU cell written out, and the length mask after them (`r = sigmoid(gi[:, :H] +
// gh[:, :H])` ... `h = torch.where(keep, (1 - z) * n + z * h, h)`, torch.nn.GRUCell's equations):
// one site of every node from the six gate slices to the where (Note [Cell sites]).
inline constexpr const char* kGruCell = "GRU cell";
// aten::matmul(x, w) of the value x a loop carries (a recurrent projection), whose result only an
// aten::add of a bias reads (the tagger's `torch.matmul(h, self.w_hh) + self.b_hh` per time step):
// a region of the two nodes (Note [Cell sites]), computed as one addmm. Elsewhere (the tree's and
// the MoE's projections, once per trip on fresh rows) the fused bias measured within a few per
// cent either way, so those are left alone rather than bound by the measurements' noise.
inline constexpr const char* kBiasMatmul = "matmul bias";
// Attention written out: `softmax(q @ kᵀ * scale + bias, -1) @ v`, the scale (a multiply or a
// divide), the bias and a masked_fill of the scores each optional (Transformer-XL's layers): a
// region from the key's transpose to the second matmul (Note [Cell sites]), computed as one
// scaled_dot_product_attention.
inline constexpr const char* kAttention = "attention";
// A residual add and the layer norm of its sum, the sum read elsewhere only after the norm
// (`h = h + attn(...)`, then `y = layer_norm(h, ...)`, and the next residual add reads h: every
// Transformer block's pre-norm): a region of the two nodes whose result is the norm's and which
// also computes the add's value (Note [Cell sites]), computed as one symtune::add_layer_norm.
inline constexpr const char* kAddLayerNorm = "add layer norm";
// A bias add, the dropout of its sum and the residual add of that (`r + F.dropout(x @ w + b, p,
// self.training)`: the end of a Transformer sublayer), every value between read only by the next:
// a region of the three nodes (Note [Cell sites]), computed as one symtune::bias_dropout_add.
inline constexpr const char* kBiasDropoutAdd = "bias dropout add";
// A batch norm, its ReLU and the convolution that reads it (`conv2d(relu(batch_norm(y, ...)))`: a
// convolution block's normalization and activation and the next block's convolution), each value
// between read only by the next: a region of the three nodes (Note [Cell sites]), computed in
// training mode as one symtune::kernels::batchNormReluConv2d, which keeps the batch norm's input
// alone for the backward where the three ops keep it and the ReLU's output. Named after its batch
// norm with " (+ conv)": the batch norm is a kBatchNormRelu pair's site too.
inline constexpr const char* kBatchNormReluConv = "batch norm ReLU convolution";
// Two convolution blocks in a row (`relu(batch_norm(conv2d(relu(batch_norm(conv2d(x, ...)))))`:
// early exit's stages), each value between read only by the next: a region of the six nodes
// (Note [Cell sites]), whose candidates trade time for memory — the first batch norm, its ReLU
// and the second convolution as the lean block, or the whole pair run again in its backward
// (symtune::kernels::convBlockPairAgain). Looked for only when the binder weighs memory
// (BinderOptions::memorySlack): by time alone it holds nothing the lean block region does not.
// Named after its first convolution with " (+ block)".
inline constexpr const char* kConvBlockPair = "convolution block pair";

// The training loss the trainer takes of the model's output: the mean cross-entropy of [N, C]
// logits against N class indices (torch::nn::functional::cross_entropy). Not a node of the
// model's graph: a site of its own, named "loss", whose stack is the logits and the targets.
inline constexpr const char* kSoftmaxCrossEntropy = "softmax cross-entropy";
inline constexpr const char* kLossSite = "loss";

// Note [Two-node sites]
// A site of two nodes is bound at its first node, whose execution computes both (the reference:
// the two ATen ops one after the other; a candidate: one fused op), and its second node passes on
// what it is given. Both nodes lie in one block and the first's result has no other use, so the
// second always runs right after the first with that result: the pair computes what the two ATen
// ops do whichever candidate ran. The binder hands the second node through only while the first
// is a site it binds.

// Note [Loop-carried rows]
// Run as written, every trip of such a loop copies the whole tensor (index_copy is out of place),
// and its backward fills a zero gradient the size of the whole tensor for every row read (the
// backward of index_select) and copies the whole gradient for the write: per trip, several passes
// over a tensor of which the trip touches a few rows. The pattern guarantees that within a trip
// every read of the carried value comes before the write and nothing else sees that value, so
// one buffer can serve every trip: the `rows-in-place` candidate (engine/src/binding/
// carried_rows.cpp) copies the loop's initial value once, writes each trip's rows into it in
// place, and keeps the gradient as one buffer too: a read's backward notes its rows' gradient,
// a write's backward takes its rows' gradient out of the buffer (and zeroes them: what was
// overwritten gets none), and the entry's backward hands the buffer on — one zero fill per
// backward. The whole loop is one decision: the binder decides at the first node the loop runs
// (measuring by replaying the reads and writes of an earlier execution of the loop in the same
// bucket, recorded while it ran as written), and every node of the group follows it until that
// execution of the loop ends. A tensor the loop only reads (kInvariantRows) is the same group
// without a write: its reads share the gradient buffer and the buffer is the tensor itself.
struct CarriedRows {
  const torch::jit::Node* loop = nullptr;
  // The body's input that is the tensor (loop-carried), or the tensor defined outside the loop
  // (loop-invariant).
  const torch::jit::Value* carried = nullptr;
  // The aten::index_copy (or aten::index_add: `accumulate`); none for loop-invariant.
  const torch::jit::Node* writer = nullptr;
  bool accumulate = false;
  std::vector<const torch::jit::Node*> readers;  // the aten::index_select nodes, in body order
  int64_t dim = 0;                               // the dimension every one of them indexes

  // Its slots in the loop's frame (LoopFrames): the binder's choice for the running execution of
  // the loop, and the candidate's buffer — one each per group, several groups sharing a loop.
  const void* choiceKey() const { return &writer; }
  const void* bufferKey() const { return &readers; }

  // What an execution of the loop did, kept for measuring (recorded while it ran as written).
  struct Event {
    const torch::jit::Node* node = nullptr;  // a reader or the writer
    at::Tensor index;
    at::Tensor source;  // the writer's rows (detached)
    bool sourceGrad = false;
  };
  std::string recordedBucket;  // empty: nothing recorded
  at::Tensor recordedEntry;    // the loop's initial value (detached)
  bool entryGrad = false;
  std::vector<Event> recorded;
};

// Note [Cell sites]
// A GRU cell's gates are a dozen elementwise nodes between the two projections and the next
// state; run as written, each is an ATen op with an autograd node, per time step (a recurrent
// matmul and its bias add are the same thing in small: kBiasMatmul; attention's scores, scale,
// bias, mask, softmax and weighted sum are another: kAttention). As a site, the nodes are one
// region of their block: every value a region node computes is used only by region
// nodes but the last one's, so what the region computes is a function of the values it reads from
// outside (`inputs`: the projections, the state, the mask, the slices' bounds). The binder decides
// at the region's first node, once per execution of the region (a trip of the loop around it):
// when a fused candidate is chosen, every node but the last only notes the outside values it is
// given and leaves an undefined tensor for its result (no other node reads it), and the last node
// runs the candidate on the noted values; when the reference is, the nodes run as written (each
// as its own site where it is one). A new bucket runs as written up to its last node, which
// measures the candidates on the values noted in that execution and computes the result with the
// winner, as every later execution in the bucket will. The reference of a measurement is the
// region's nodes run one after the other by their ATen ops. Sites among the region's nodes are
// decided only in executions that run it as written.
// A region may also compute one value of a node before its last that is read outside it, when
// every such read comes after the last node (the residual stream of kAddLayerNorm): `alsoOut`.
// Its candidates leave that value on the stack after the result; when a fused candidate ran, the
// earlier node left an undefined tensor for it, and the binder hands the evaluator the fused value
// as that node's result once the last node has run (OpBinder::takeLateOutput), before anything
// outside reads it.
struct CellRegion {
  std::string pattern;  // kGruCell, kBiasMatmul, kAttention, kAddLayerNorm, kBiasDropoutAdd,
                        // kBatchNormReluConv, kConvBlockPair
  std::vector<const torch::jit::Node*> nodes;  // in block order: the first decides, the last
                                               // computes the result
  // The values region nodes read from outside the region, in the order first read.
  std::vector<const torch::jit::Value*> inputs;
  // Per node (as `nodes`), per input: its index in `inputs`, or -1 for a region node's result.
  std::vector<std::vector<int>> slots;
  // GRU cells: the indices in `inputs` of the input projection [B, 3H], the hidden projection,
  // the state [B, H], the mask (-1: none), and of each gate slice's dimension, start and end (the
  // input projection's r, z, n, then the hidden projection's).
  size_t gatesIn = 0, gatesHidden = 0, state = 0;
  int keep = -1;
  struct Slice {
    size_t dim = 0, start = 0, end = 0;
  };
  std::vector<Slice> slices;
  // Bias matmuls: the indices in `inputs` of the matmul's input and weight, and of the bias.
  size_t input = 0, weight = 0, bias = 0;
  // Attention: the indices in `inputs` of the query, the key and the value; of the transpose's
  // dimensions (-1: no transpose in the region, the matmul reads the key transposed already); of
  // the scale (-1: none) and whether it divides; of the scores' additive bias (-1: none); of the
  // mask and the value it fills (-1: none); of the softmax's dimension.
  size_t query = 0, key = 0, value = 0;
  int keyDim0 = -1, keyDim1 = -1;
  int scale = -1;
  bool divides = false;
  int scoreBias = -1, mask = -1, fill = -1;
  size_t softmaxDim = 0;
  // Add + layer norm: `input` and `residual` are the add's operands, `weight` and `bias` the
  // norm's (None constants when absent), and the indices of its normalized shape and epsilon.
  size_t residual = 0, normShape = 0, eps = 0;
  // Bias + dropout + add: `input`, `bias` and `residual`, and the indices of the dropout's
  // probability and training flag.
  size_t dropoutP = 0, train = 0;
  // A region node's result read outside the region after its last node, or nullptr.
  const torch::jit::Value* alsoOut = nullptr;
  // Whether a view reads the result, or what ops keeping its layout made of it: a candidate that
  // returns another layout than the ATen ops makes it theirs.
  bool viewedAfter = false;
  // Whether a node outside the region that draws random numbers runs between its first and last
  // node (Note [A measured region draws as a bound one] in binder_cells.cpp).
  bool drawsBetween = false;

  const torch::jit::Node* first() const { return nodes.front(); }
  const torch::jit::Node* last() const { return nodes.back(); }
  // The position of `node` in `nodes`, or -1.
  int indexOf(const torch::jit::Node* node) const;
};

// The GRU cell region whose result `last` computes (an aten::where of the cell's blend and the
// state, or the blend's aten::add when no mask follows), or nullptr.
std::shared_ptr<CellRegion> findGruCell(const torch::jit::Node* last);
// The bias matmul region whose aten::add `add` is (the add of a recurrent matmul's result, used by
// nothing else, and another tensor: the bias, when it turns out to be a vector of the weight's
// columns), or nullptr. An add feeding only a GELU is a bias-GELU site instead.
std::shared_ptr<CellRegion> findBiasMatmul(const torch::jit::Node* add);

// The attention region whose second matmul `last` is (aten::matmul(softmax(scores, dim), v), the
// scores a matmul of the query and the key's transpose, then optionally scaled, biased and
// masked, every value between used only by the next), or nullptr.
std::shared_ptr<CellRegion> findAttention(const torch::jit::Node* last);

// The add + layer norm region whose aten::layer_norm `norm` is (of an aten::add(a, b, 1) of two
// tensors in its block, whose sum nothing reads between the add and the norm), or nullptr.
std::shared_ptr<CellRegion> findAddLayerNorm(const torch::jit::Node* norm);

// The bias + dropout + add region whose residual aten::add `add` is (of aten::dropout(aten::add(x,
// b, 1), p, train) and another tensor, in either order), or nullptr.
std::shared_ptr<CellRegion> findBiasDropoutAdd(const torch::jit::Node* add);

// The batch norm + ReLU + convolution region whose aten::conv2d `conv` is (of aten::relu(aten::
// batch_norm(...)), the convolution's input; its weight and the batch norm's other inputs from
// outside), or nullptr.
std::shared_ptr<CellRegion> findBatchNormReluConv(const torch::jit::Node* conv);

// The convolution block pair region whose second ReLU `relu` is (aten::relu(aten::batch_norm(
// aten::conv2d(aten::relu(aten::batch_norm(aten::conv2d(x, ...)))))), the convolutions' weights
// and the batch norms' other inputs from outside), or nullptr.
std::shared_ptr<CellRegion> findConvBlockPair(const torch::jit::Node* relu);

// Whether a region of `pattern` holds a batch norm whose running statistics it updates and spans
// convolution blocks, so that a plan recomputing one block splits it (kBatchNormReluConv,
// kConvBlockPair; Note [Regions split by a recomputed unit] in segment_executor.cpp).
bool isConvBlockRegion(const std::string& pattern);

// The partial slices of one tensor along one dimension, and what their executions have shown.
// Ranges are learned: the slices that read one value of the tensor (an instance: the tensor as
// one trip of a loop, or one forward, computes it) are noted, and the next instance is split at
// those ranges. A slice whose range is not among them runs as the ATen op.
struct SliceGroup {
  std::vector<const torch::jit::Node*> members;

  // The ranges [start, end) the last complete instance's slices read.
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const { return ranges_; }
  void setRanges(std::vector<std::pair<int64_t, int64_t>> ranges);

  // Notes an execution of a member on `source` (every execution, whatever is bound): a new
  // instance makes the ranges the last instance's.
  void observe(const at::Tensor& source, int64_t start, int64_t end);
  // The parts of `source` split along `dim` at `ranges` (made once per instance); empty when the
  // ranges are not at least two disjoint ranges inside the dimension.
  const std::vector<std::pair<std::pair<int64_t, int64_t>, at::Tensor>>& partsOf(
      const at::Tensor& source, int64_t dim);
  // Whether `ranges` can split a dimension of `size` (remembered until the ranges change: every
  // execution of a member asks).
  bool splittable(int64_t size) const;

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  mutable int64_t checkedSize_ = -1;
  mutable bool checked_ = false;
  at::Tensor observed_;  // the instance being observed
  int64_t observedVersion_ = -1;
  bool observedTracked_ = false;  // autograd recorded ops on it (sameValue in op_site.cpp)
  std::vector<std::pair<int64_t, int64_t>> observedRanges_;
  at::Tensor split_;  // the instance split
  int64_t splitVersion_ = -1;
  bool splitTracked_ = false;
  std::vector<std::pair<std::pair<int64_t, int64_t>, at::Tensor>> parts_;
};

// `dim` of `tensor` as a non-negative dimension, or nullopt when the tensor is undefined, 0-d or
// has no such dimension (then the ATen op raises the model's error).
std::optional<int64_t> tensorDim(const at::Tensor& tensor, int64_t dim);

// A slice's [start, end) on a dimension of `size`, as aten::slice reads its arguments (None,
// negative, past the end).
std::pair<int64_t, int64_t> sliceRange(const c10::IValue& start, const c10::IValue& end,
                                       int64_t size);

struct OpSite {
  const torch::jit::Node* node = nullptr;  // none for the loss site
  // The values on a site's stack when it has no node (the loss site: logits, targets).
  size_t arity = 0;
  NodeId id;
  std::string name;     // "#31 aten::select rnn": node id, op, module path
  std::string pattern;  // kIdentitySlice, kLoopIndexedSelect
  // Loop-indexed sites: the loop whose counter is the node's input `counterInput`.
  const torch::jit::Node* loop = nullptr;
  size_t counterInput = 0;
  // Partial slices: the group they share with the other slices of their tensor and dimension.
  std::shared_ptr<SliceGroup> group;
  // Two-node sites: the second node, and (bias GELU) its `approximate` argument.
  const torch::jit::Node* follower = nullptr;
  std::string approximate;
  // Inputs the site's op updates in place though its schema does not say so (batch norm's
  // running statistics): a measurement gives every replay its own copy.
  std::vector<size_t> updated;
  // Inputs of `node` (a region's first node) that say whether the site trains (a batch norm's
  // `training`): an execution where one is false is in an evaluation bucket of its own (Note
  // [Evaluation buckets] in binder.cpp).
  std::vector<size_t> modeInputs;
  // Loop-carried rows: the group of the loop's reads and write of the tensor (`loop` is its loop).
  std::shared_ptr<CarriedRows> rows;
  // Cell sites: the region (`node` is its first node).
  std::shared_ptr<CellRegion> cell;
};

// How many values a site's execution finds on its stack: its region's inputs (cell sites), its
// node's, or `arity` (a site without a node).
size_t siteArity(const OpSite& site);

// Whether one of the site's modeInputs is false in an execution whose `node` has its inputs as
// the last values of `stack`.
bool evaluating(const OpSite& site, const torch::jit::Stack& stack);

// The slice groups of one graph, by (root tensor value, dimension): findOpSite shares them
// between the members.
using SliceGroups =
    std::map<std::pair<const torch::jit::Value*, int64_t>, std::shared_ptr<SliceGroup>>;

// The rows groups of one graph, by the tensor and the loop (nullptr: not a group).
using CarriedRowGroups = std::map<std::pair<const torch::jit::Value*, const torch::jit::Node*>,
                                  std::shared_ptr<CarriedRows>>;

// What the sites of one graph share, created on first use.
struct SiteGroups {
  SliceGroups slices;
  CarriedRowGroups rows;
};

// The site `node` is, or nullopt when no pattern matches. `graph` is SyMuGen's static graph
// (names); `id` the node's id in it (invalid for nodes it does not show).
std::optional<OpSite> findOpSite(const torch::jit::Node* node, NodeId id, const Graph& graph,
                                 SiteGroups& groups);

// The aten::gelu a bias-GELU site's aten::add feeds, or nullptr when `add` is no such site.
const torch::jit::Node* biasGeluFollower(const torch::jit::Node* add);
// The aten::add whose bias-GELU site `gelu` is the second node of, or nullptr.
const torch::jit::Node* biasGeluProducer(const torch::jit::Node* gelu);
// The aten::relu a batch-norm-ReLU site's aten::batch_norm feeds, or nullptr.
const torch::jit::Node* batchNormReluFollower(const torch::jit::Node* batchNorm);
// The first node of the two-node site (either pattern) whose second node is `node`, or nullptr.
const torch::jit::Node* pairProducer(const torch::jit::Node* node);

// "#31 aten::select rnn"
std::string siteName(const torch::jit::Node* node, NodeId id, const Graph& graph);

// Whether `value`, read inside `body` (a loop's body block), has the same value on every trip:
// defined outside the body, or computed in it by pure ops from such values.
bool loopInvariant(const torch::jit::Value* value, const torch::jit::Block* body);

// Whether anything in `block` (nested blocks included) writes to a tensor in place or sets a
// module attribute.
bool mutatesTensors(const torch::jit::Block* block);

}  // namespace symtune::binding
