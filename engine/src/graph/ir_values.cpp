#include "ir_values.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/scope.h>

#include "symtune/graph/symugen.h"

namespace symtune {

std::string dtypeName(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Bool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

namespace detail {

namespace {

void setInts(ValueInfo& info, const c10::IValue& v) {
  if (v.isInt()) {
    info.ints = std::vector<int64_t>{v.toInt()};
  } else if (v.isIntList()) {
    info.ints = v.toIntVector();
  }
}

}  // namespace

ValueInfo describeIrValue(const torch::jit::Value* value) {
  ValueInfo info;
  info.type = value->type()->str();
  if (auto t = value->type()->cast<c10::TensorType>()) {
    info.type = "Tensor";
    if (auto sizes = t->sizes().concrete_sizes())
      info.shape = *sizes;
    if (auto st = t->scalarType())
      info.dtype = dtypeName(*st);
  }
  if (auto constant = torch::jit::toIValue(value))
    setInts(info, *constant);
  return info;
}

ValueInfo describeRuntimeValue(const torch::jit::Value* value, const c10::IValue& v) {
  ValueInfo info;
  if (v.isNone()) {
    info.type = "NoneType";
    return info;
  }
  if (v.isTensor()) {
    info.type = "Tensor";
    const auto& t = v.toTensor();
    if (t.defined()) {
      info.shape = t.sizes().vec();
      info.dtype = dtypeName(t.scalar_type());
    }
    return info;
  }
  info.type = value->type()->str();
  setInts(info, v);
  return info;
}

std::string modulePathOf(const torch::jit::Node* node) {
  std::string path;
  if (auto cs = node->callstack()) {
    for (const auto& entry : (*cs)->vec()) {
      const auto& instance = std::get<2>(entry);
      if (!instance)
        continue;
      const std::string name = instance->instance_name();
      if (name.empty())
        continue;
      path += path.empty() ? name : "." + name;
    }
  }
  return path;
}

SourceLocation sourceOf(const torch::jit::Node* node, const std::string& method) {
  SourceLocation loc;
  loc.function = method;
  if (auto cs = node->callstack()) {
    const auto entries = (*cs)->vec();
    if (!entries.empty() && std::get<0>(entries.back()) != nullptr) {
      loc.function = std::get<0>(entries.back())->name();
    }
  }
  const auto& range = node->sourceRange();
  if (auto flc = range.file_line_col()) {
    loc.file = std::get<0>(*flc);
    loc.line = static_cast<int>(std::get<1>(*flc));
  } else if (auto src = range.source()) {
    loc.file = src->filename() ? *src->filename() : "<string>";
    loc.line =
        static_cast<int>(src->lineno_for_offset(range.start()) + 1 + src->starting_line_no());
  }
  return loc;
}

bool isGraphNode(const torch::jit::Node* node) {
  switch (node->kind()) {
    case c10::prim::Constant:
    case c10::prim::GetAttr:
    case c10::prim::ListConstruct:
    case c10::prim::TupleConstruct:
    case c10::prim::DictConstruct:
    case c10::prim::ListUnpack:
    case c10::prim::TupleUnpack:
    case c10::prim::Uninitialized:
      return false;
    default:
      return true;
  }
}

}  // namespace detail
}  // namespace symtune
