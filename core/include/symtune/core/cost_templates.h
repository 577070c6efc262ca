#pragma once
// The operator expression template library: for each supported op kind, symbolic expressions —
// written once — of its FLOPs, bytes read, bytes written and activation bytes saved for backward,
// over its input and output shapes. Evaluated on concrete shapes; an op without a template, or with
// a shape the template needs but the graph does not know, is reported as unknown — never guessed.
// Part of symtune::core. docs/cost-templates.md lists every template.

#include <optional>
#include <string>
#include <vector>

#include "symtune/core/graph.h"

namespace symtune {

// One op's template as text. Expressions use integers, + - * / and parentheses, and:
//   inI[d]      size of dimension d of tensor input I (d < 0 counts from the end)
//   outI[d]     the same for output I
//   numel(inI)  elements of input I (also outI); bytes(inI): numel times the element size, 0 for
//               None and for non-tensor values
//   has(inI)    1 when input I is a tensor, 0 when it is None or absent
//   val(inI, k) element k of an int or int[] input (kernel sizes, strides)
//   E           the element size of output 0, in bytes
struct CostTemplate {
  std::string kinds;  // the op kinds it covers, space-separated: "aten::add aten::add_"
  std::string opClass;
  std::string flops, bytesRead, bytesWritten, savedBytes;
};

struct OpCost {
  bool known = false;  // false: no template for the op kind
  std::string opClass;
  std::optional<double> flops, bytesRead, bytesWritten, savedBytes;  // absent: shapes unknown
};

const std::vector<CostTemplate>& costTemplates();

// The template for `kind`, or nullptr.
const CostTemplate* findCostTemplate(const std::string& kind);

// Evaluates `kind`'s template on the given inputs and outputs.
OpCost evaluateCost(const std::string& kind, const std::vector<ValueInfo>& inputs,
                    const std::vector<ValueInfo>& outputs);

// Evaluates one expression (the syntax above). Throws std::invalid_argument for a malformed
// expression; returns nullopt when it needs a shape or value that is unknown.
std::optional<double> evaluateCostExpression(const std::string& expression,
                                             const std::vector<ValueInfo>& inputs,
                                             const std::vector<ValueInfo>& outputs);

// Bytes per element of a dtype name ("float32" -> 4); 0 for unknown names.
int elementSize(const std::string& dtype);

}  // namespace symtune
