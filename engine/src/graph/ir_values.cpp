#include "ir_values.h"

#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
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
  } else if (v.isBool()) {  // as 0 or 1: a template reads a flag (convolution's `transposed`)
    info.ints = std::vector<int64_t>{v.toBool() ? 1 : 0};
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

namespace {

constexpr char kSelfCall[] = "SELF";  // torch::jit's name for a call of the module's own method
// The outermost scope of the nodes nameModuleCalls named; the module path is the scopes inside.
constexpr char kNamedScope[] = "symtune.modules";

// A call site as the inliner records it: the call's source range and the last attribute read.
using CallKey = std::tuple<const torch::jit::Source*, size_t, size_t, std::string>;

CallKey callKey(const torch::jit::SourceRange& range, const std::string& lastName) {
  return {range.source().get(), range.start(), range.end(), lastName};
}

// The relative path of every module-method call in `graph` and, through them, in every method
// they reach. A key seen with two paths maps to none: such calls keep the inliner's name.
class CallPaths {
 public:
  void collect(const torch::jit::Graph& graph) {
    if (graph.inputs().empty())
      return;
    collectBlock(graph.block(), graph.inputs()[0]);
  }

  std::optional<std::string> find(const CallKey& key) const {
    const auto it = paths_.find(key);
    return it == paths_.end() ? std::nullopt : it->second;
  }

 private:
  void collectBlock(const torch::jit::Block* block, const torch::jit::Value* self) {
    for (const torch::jit::Node* node : block->nodes()) {
      for (const torch::jit::Block* inner : node->blocks())
        collectBlock(inner, self);
      if (node->kind() != c10::prim::CallMethod)
        continue;
      const auto type = node->input(0)->type()->cast<c10::ClassType>();
      if (!type)
        continue;
      std::vector<std::string> names;  // innermost first
      const torch::jit::Value* v = node->input(0);
      while (v->node()->kind() == c10::prim::GetAttr) {
        names.push_back(v->node()->s(c10::attr::name));
        v = v->node()->input(0);
      }
      if (v == self && !names.empty()) {
        std::string path;
        for (auto it = names.rbegin(); it != names.rend(); ++it)
          path += path.empty() ? *it : "." + *it;
        const auto [at, fresh] = paths_.emplace(callKey(node->sourceRange(), names.front()), path);
        if (!fresh && at->second != path)
          at->second.reset();
      }
      torch::jit::Function* callee = type->findMethod(node->s(c10::attr::name));
      if (callee && visited_.insert(callee).second) {
        if (auto* graphFunction = torch::jit::tryToGraphFunction(*callee))
          collect(*graphFunction->graph());
      }
    }
  }

  std::map<CallKey, std::optional<std::string>> paths_;
  std::unordered_set<const torch::jit::Function*> visited_;
};

}  // namespace

std::string modulePathOf(const torch::jit::Node* node) {
  static const c10::Symbol named = c10::Symbol::scope(kNamedScope);
  std::vector<std::string> parts;  // innermost first
  // Node::scope() reads only; torch::jit does not mark it const.
  for (torch::jit::ScopePtr scope = const_cast<torch::jit::Node*>(node)->scope();
       scope && !scope->isRoot(); scope = scope->parent()) {
    if (scope->name() == named) {
      std::string path;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it)
        path += path.empty() ? *it : "." + *it;
      return path;
    }
    parts.push_back(scope->name().toUnqualString());
  }
  // A graph nameModuleCalls did not name: the inliner's names.
  std::string path;
  if (auto cs = node->callstack()) {
    for (const auto& entry : (*cs)->vec()) {
      const auto& instance = std::get<2>(entry);
      if (!instance)
        continue;
      const std::string name = instance->instance_name();
      if (name.empty() || name == kSelfCall)
        continue;
      path += path.empty() ? name : "." + name;
    }
  }
  return path;
}

void nameModuleCalls(const torch::jit::Graph& method, torch::jit::Graph& inlined) {
  CallPaths paths;
  paths.collect(method);
  const torch::jit::ScopePtr named =
      c10::make_intrusive<torch::jit::Scope>()->push(c10::Symbol::scope(kNamedScope));
  std::unordered_map<const torch::jit::InlinedCallStack*, torch::jit::ScopePtr> scopes;
  // The scope of the calls `cs` stands for, from the outermost: each call's path from its
  // caller's module, pushed part by part.
  std::function<torch::jit::ScopePtr(const torch::jit::InlinedCallStackPtr&, torch::jit::ScopePtr)>
      scopeOf = [&](const torch::jit::InlinedCallStackPtr& cs, torch::jit::ScopePtr outer) {
        std::string path;
        if (const auto instance = cs->module_instance()) {
          path = instance->instance_name();
          if (path == kSelfCall)
            path.clear();
          else if (auto found = paths.find(callKey(cs->source_range(), path)))
            path = *found;
        }
        for (size_t begin = 0; begin < path.size();) {
          const size_t dot = std::min(path.find('.', begin), path.size());
          outer = outer->push(c10::Symbol::scope(path.substr(begin, dot - begin)));
          begin = dot + 1;
        }
        return cs->callee() ? scopeOf(*cs->callee(), outer) : outer;
      };
  std::function<void(torch::jit::Block*)> visit = [&](torch::jit::Block* block) {
    for (torch::jit::Node* node : block->nodes()) {
      torch::jit::ScopePtr scope = named;
      if (auto cs = node->callstack()) {
        auto [it, fresh] = scopes.emplace(cs->get(), nullptr);
        if (fresh)
          it->second = scopeOf(*cs, named);
        scope = it->second;
      }
      node->setScope(scope);
      for (torch::jit::Block* inner : node->blocks())
        visit(inner);
    }
  };
  visit(inlined.block());
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

const torch::jit::Node* enclosingWith(const torch::jit::Node* node) {
  for (const torch::jit::Node* at = node; at != nullptr; at = at->owningBlock()->owningNode()) {
    std::vector<const torch::jit::Node*> open;
    for (const torch::jit::Node* n : at->owningBlock()->nodes()) {
      if (n == at)
        break;
      if (n->kind() == c10::prim::Enter)
        open.push_back(n);
      else if (n->kind() == c10::prim::Exit && !open.empty())
        open.pop_back();
    }
    if (!open.empty())
      return open.back();
  }
  return nullptr;
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

bool mayDraw(const torch::jit::Node* node) {
  const bool known = node->kind().is_aten() || node->kind().is_prim();
  if (node->isNondeterministic() || (!known && node->maybeSchema() != nullptr))
    return true;
  for (const torch::jit::Block* b : node->blocks()) {
    for (const torch::jit::Node* inner : b->nodes()) {
      if (mayDraw(inner))
        return true;
    }
  }
  return false;
}

}  // namespace detail
}  // namespace symtune
