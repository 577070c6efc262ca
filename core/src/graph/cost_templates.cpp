// The operator expression templates. Conventions (docs/cost-templates.md):
//  - a multiply-add is 2 FLOPs; a comparison, exp or division is 1;
//  - bytes read/written count each tensor once (no cache effects);
//  - saved bytes are the tensors autograd keeps for the op's backward (as in PyTorch's
//    derivatives.yaml), 0 when it keeps none; view ops cost nothing.

#include <sstream>
#include <unordered_map>

#include "symtune/core/cost_templates.h"

namespace symtune {

namespace {

// Shared pieces of the table.
constexpr const char* kUnaryRead = "bytes(in0)";
constexpr const char* kOutBytes = "bytes(out0)";
constexpr const char* kBinaryRead = "bytes(in0) + bytes(in1)";

}  // namespace

const std::vector<CostTemplate>& costTemplates() {
  static const std::vector<CostTemplate> table = {
      // --- convolution and matrix products ---------------------------------------------------
      // out = conv(x[N,C,H,W], w[O,C/g,kh,kw]) + b: each output element is a dot product of
      // length C/g*kh*kw = numel(w)/O.
      {"aten::conv1d aten::conv2d aten::conv3d", "conv",
       "2*numel(out0)*(numel(in1)/in1[0]) + has(in2)*numel(out0)",
       "bytes(in0) + bytes(in1) + bytes(in2)", kOutBytes, "bytes(in0) + bytes(in1)"},
      // A transposed convolution's weight is [C, O/g, kh, kw]: each *input* element meets
      // numel(w)/C = O/g*kh*kw weights. _convolution and convolution (what torch.jit.trace
      // records) say which they are in input 6, `transposed`: unknown when it is not a constant.
      {"aten::conv_transpose1d aten::conv_transpose2d aten::conv_transpose3d", "conv",
       "2*numel(in0)*(numel(in1)/in1[0]) + has(in2)*numel(out0)",
       "bytes(in0) + bytes(in1) + bytes(in2)", kOutBytes, "bytes(in0) + bytes(in1)"},
      {"aten::_convolution aten::convolution", "conv",
       "2*((1 - val(in6, 0))*numel(out0) + val(in6, 0)*numel(in0))*(numel(in1)/in1[0]) + "
       "has(in2)*numel(out0)",
       "bytes(in0) + bytes(in1) + bytes(in2)", kOutBytes, "bytes(in0) + bytes(in1)"},
      // linear(x[...,K], w[N,K], b[N])
      {"aten::linear", "matmul", "2*numel(out0)*in1[1] + has(in2)*numel(out0)",
       "bytes(in0) + bytes(in1) + bytes(in2)", kOutBytes, "bytes(in0) + bytes(in1)"},
      // addmm(b, m1[M,K], m2[K,N]) = b + m1 @ m2
      {"aten::addmm", "matmul", "2*in1[0]*in2[1]*in1[1] + in1[0]*in2[1]",
       "bytes(in0) + bytes(in1) + bytes(in2)", kOutBytes, "bytes(in1) + bytes(in2)"},
      {"aten::mm", "matmul", "2*in0[0]*in1[1]*in0[1]", kBinaryRead, kOutBytes, kBinaryRead},
      {"aten::bmm", "matmul", "2*in0[0]*in0[1]*in1[2]*in0[2]", kBinaryRead, kOutBytes, kBinaryRead},
      // matmul with broadcasting: every output element is a dot product of length K = in0[-1].
      {"aten::matmul", "matmul", "2*numel(out0)*in0[-1]", kBinaryRead, kOutBytes, kBinaryRead},
      // scaled_dot_product_attention(q[...,L,E], k[...,S,E], v[...,S,Ev]): QK^T, softmax (5 per
      // score), and PV.
      {"aten::scaled_dot_product_attention", "attention",
       "2*(numel(in0)/in0[-1])*in1[-2]*in0[-1] + 5*(numel(in0)/in0[-1])*in1[-2] + "
       "2*(numel(in0)/in0[-1])*in1[-2]*in2[-1]",
       "bytes(in0) + bytes(in1) + bytes(in2)", kOutBytes,
       "bytes(in0) + bytes(in1) + bytes(in2) + bytes(out0)"},

      // --- recurrent cells ---------------------------------------------------------------------
      // lstm_cell(x[B,I], [h, c], w_ih[4H,I], w_hh[4H,H], b_ih, b_hh): two matmuls with bias,
      // then 3 sigmoids (4 each), 2 tanh (4 each) and 3 multiply/adds on [B,H]: 23 per element.
      {"aten::lstm_cell", "rnn",
       "2*in0[0]*in2[0]*(in2[1] + in3[1]) + 2*in0[0]*in2[0] + 23*in0[0]*in3[1]",
       "bytes(in0) + 2*in0[0]*in3[1]*E + bytes(in2) + bytes(in3) + bytes(in4) + bytes(in5)",
       "2*in0[0]*in3[1]*E", "bytes(in0) + 6*in0[0]*in3[1]*E"},
      // gru_cell(x[B,I], h[B,H], w_ih[3H,I], w_hh[3H,H], b_ih, b_hh): two matmuls with bias, then
      // 2 sigmoids, 1 tanh (4 each) and 5 multiply/adds on [B,H]: 17 per element.
      {"aten::gru_cell", "rnn",
       "2*in0[0]*in2[0]*(in2[1] + in3[1]) + 2*in0[0]*in2[0] + 17*in0[0]*in3[1]",
       "bytes(in0) + bytes(in1) + bytes(in2) + bytes(in3) + bytes(in4) + bytes(in5)", kOutBytes,
       "bytes(in0) + bytes(in1) + 5*in0[0]*in3[1]*E"},

      // --- normalization -------------------------------------------------------------------------
      // Statistics cost 4 per element (sum, subtract, square, sum); batch norm folds normalize and
      // affine into one multiply-add per element (2), layer/group norm cannot (4).
      {"aten::batch_norm aten::_native_batch_norm_legit aten::native_batch_norm", "norm",
       "6*numel(in0)", "bytes(in0) + bytes(in1) + bytes(in2) + bytes(in3) + bytes(in4)", kOutBytes,
       kUnaryRead},
      {"aten::layer_norm aten::native_layer_norm aten::group_norm", "norm", "8*numel(in0)",
       "bytes(in0) + bytes(in2) + bytes(in3)", kOutBytes, kUnaryRead},

      // --- activations ---------------------------------------------------------------------------
      {"aten::relu aten::relu_ aten::threshold", "activation", "numel(out0)", kUnaryRead, kOutBytes,
       kOutBytes},
      {"aten::sigmoid aten::sigmoid_ aten::tanh aten::tanh_", "activation", "4*numel(out0)",
       kUnaryRead, kOutBytes, kOutBytes},
      {"aten::gelu aten::gelu_", "activation", "8*numel(out0)", kUnaryRead, kOutBytes, kUnaryRead},
      {"aten::silu aten::silu_", "activation", "5*numel(out0)", kUnaryRead, kOutBytes, kUnaryRead},
      {"aten::softmax aten::_softmax aten::log_softmax aten::_log_softmax", "activation",
       "5*numel(out0)", kUnaryRead, kOutBytes, kOutBytes},
      {"aten::dropout aten::dropout_", "elementwise", "numel(out0)", kUnaryRead, kOutBytes,
       "numel(in0)"},

      // --- elementwise arithmetic ----------------------------------------------------------------
      {"aten::add aten::add_ aten::sub aten::sub_ aten::rsub", "elementwise", "numel(out0)",
       kBinaryRead, kOutBytes, "0"},
      {"aten::mul aten::mul_ aten::div aten::div_", "elementwise", "numel(out0)", kBinaryRead,
       kOutBytes, kBinaryRead},
      {"aten::gt aten::lt aten::ge aten::le aten::eq aten::ne", "elementwise", "numel(out0)",
       kBinaryRead, kOutBytes, "0"},
      {"aten::abs aten::neg aten::exp aten::log aten::sqrt aten::rsqrt aten::pow", "elementwise",
       "numel(out0)", kBinaryRead, kOutBytes, kUnaryRead},

      // Selection and clamping: one comparison or pick per output element.
      {"aten::where", "elementwise", "numel(out0)", "bytes(in0) + bytes(in1) + bytes(in2)",
       kOutBytes, kUnaryRead},
      {"aten::masked_fill aten::masked_fill_", "elementwise", "numel(out0)", kBinaryRead, kOutBytes,
       "bytes(in1)"},
      {"aten::clamp aten::clamp_ aten::clamp_min aten::clamp_max", "elementwise", "numel(out0)",
       kUnaryRead, kOutBytes, kUnaryRead},
      {"aten::__and__ aten::__or__ aten::logical_and aten::logical_or aten::logical_not",
       "elementwise", "numel(out0)", kBinaryRead, kOutBytes, "0"},

      // --- reductions ----------------------------------------------------------------------------
      {"aten::mean aten::sum aten::any aten::all", "reduction", "numel(in0)", kUnaryRead, kOutBytes,
       "0"},
      // Their backward finds where the result came from (amax, amin) or divides by it (norm): the
      // input and the result are kept.
      {"aten::amax aten::amin aten::norm", "reduction", "numel(in0)", kUnaryRead, kOutBytes,
       "bytes(in0) + bytes(out0)"},
      {"aten::cumsum", "reduction", "numel(out0)", kUnaryRead, kOutBytes, "0"},
      // topk(x, k, dim): one comparison per element (a selection), values and indices written.
      {"aten::topk", "reduction", "numel(in0)", kUnaryRead, "bytes(out0) + bytes(out1)",
       "bytes(out1)"},
      {"aten::nonzero", "reduction", "numel(in0)", kUnaryRead, kOutBytes, "0"},

      // --- pooling and lookup --------------------------------------------------------------------
      // max_pool2d(x, kernel_size, ...): one comparison per window element per output.
      // Its backward keeps the input and the indices of the maxima (int64, 8 bytes each).
      {"aten::max_pool2d aten::max_pool2d_with_indices", "pool",
       "numel(out0)*val(in1, 0)*val(in1, 1)", kUnaryRead, kOutBytes, "bytes(in0) + 8*numel(out0)"},
      {"aten::avg_pool2d", "pool", "numel(out0)*val(in1, 0)*val(in1, 1)", kUnaryRead, kOutBytes,
       "bytes(in0)"},
      {"aten::adaptive_avg_pool2d", "pool", "numel(in0)", kUnaryRead, kOutBytes, "0"},
      // embedding(weight[V,D], indices): reads the looked-up rows and the indices.
      {"aten::embedding", "lookup", "0", "bytes(out0) + bytes(in1)", kOutBytes, "bytes(in1)"},
      // index_select(x, dim, index): reads the selected slices and the index.
      {"aten::index_select", "lookup", "0", "bytes(out0) + bytes(in2)", kOutBytes, "bytes(in2)"},
      // index(x, [indices...]) and gather(x, dim, index): the picked elements. gather's backward
      // keeps the index and the input; index's keeps its index tensors (a list, not counted).
      {"aten::index", "lookup", "0", kOutBytes, kOutBytes, "0"},
      {"aten::gather", "lookup", "0", kOutBytes, kOutBytes, "bytes(in0) + bytes(in2)"},
      // index_add(x, dim, index, source): one add per source element; x is copied.
      {"aten::index_add aten::index_add_", "lookup", "numel(in3)",
       "bytes(in0) + bytes(in2) + bytes(in3)", kOutBytes, "bytes(in2)"},
      {"aten::index_copy aten::index_copy_ aten::scatter aten::scatter_", "lookup", "0",
       "bytes(in0) + bytes(in2) + bytes(in3)", kOutBytes, "bytes(in2)"},

      // --- losses ------------------------------------------------------------------------------
      // cross_entropy_loss(logits[N,C], target[N]): log_softmax (5 per logit) + one pick per row.
      {"aten::cross_entropy_loss", "loss", "5*numel(in0) + in0[0]", kBinaryRead, kOutBytes,
       "bytes(in0) + bytes(in1)"},
      {"aten::nll_loss aten::nll_loss_nd", "loss", "in0[0]", kBinaryRead, kOutBytes, "bytes(in1)"},
      {"aten::mse_loss", "loss", "3*numel(in0)", kBinaryRead, kOutBytes, kBinaryRead},

      // --- layout (views and shape queries cost nothing) -----------------------------------------
      {"aten::view aten::reshape aten::flatten aten::t aten::transpose aten::permute "
       "aten::unsqueeze aten::squeeze aten::expand aten::select aten::slice aten::size "
       "aten::dim aten::numel aten::Bool aten::Int aten::Float aten::item aten::append",
       "layout", "0", "0", "0", "0"},
      {"aten::cat aten::stack aten::contiguous aten::clone aten::to", "layout", "0", kOutBytes,
       kOutBytes, "0"},
      {"aten::detach", "layout", "0", "0", "0", "0"},
      // New tensors: written once, nothing read.
      {"aten::zeros aten::zeros_like aten::ones aten::ones_like aten::full aten::full_like "
       "aten::empty aten::empty_like aten::arange",
       "creation", "0", "0", kOutBytes, "0"},
  };
  return table;
}

const CostTemplate* findCostTemplate(const std::string& kind) {
  // Every counted op asks (a counting forward, per-node telemetry): the table by kind, made once.
  static const std::unordered_map<std::string, const CostTemplate*> byKind = [] {
    std::unordered_map<std::string, const CostTemplate*> out;
    for (const auto& t : costTemplates()) {
      std::istringstream kinds(t.kinds);
      std::string k;
      while (kinds >> k)
        out.emplace(k, &t);  // the first template that names a kind holds it
    }
    return out;
  }();
  const auto found = byKind.find(kind);
  return found != byKind.end() ? found->second : nullptr;
}

OpCost evaluateCost(const std::string& kind, const std::vector<ValueInfo>& inputs,
                    const std::vector<ValueInfo>& outputs) {
  OpCost cost;
  const CostTemplate* t = findCostTemplate(kind);
  if (t == nullptr)
    return cost;
  cost.known = true;
  cost.opClass = t->opClass;
  cost.flops = evaluateCostExpression(t->flops, inputs, outputs);
  cost.bytesRead = evaluateCostExpression(t->bytesRead, inputs, outputs);
  cost.bytesWritten = evaluateCostExpression(t->bytesWritten, inputs, outputs);
  cost.savedBytes = evaluateCostExpression(t->savedBytes, inputs, outputs);
  return cost;
}

}  // namespace symtune
