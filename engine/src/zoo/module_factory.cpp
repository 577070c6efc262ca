#include "module_factory.h"

#include <torch/csrc/jit/frontend/parser.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

namespace symtune::zoo {

namespace {

// The zoo's model files call torch.nn.functional as `F` (as Python code does): `F.gelu(x)` is
// aten::gelu. Everything else resolves as with torch::jit::compile.
struct ZooResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(
      const std::string& name, torch::jit::GraphFunction& m,
      const torch::jit::SourceRange& loc) override {
    if (name == "F")
      return std::make_shared<torch::jit::BuiltinModule>("aten");
    return native_->resolveValue(name, m, loc);
  }
  c10::TypePtr resolveType(const std::string& name, const torch::jit::SourceRange& loc) override {
    return native_->resolveType(name, loc);
  }

 private:
  torch::jit::ResolverPtr native_ = torch::jit::nativeResolver();
};

// Module::define with a named source: its ranges then carry the model file and its line numbers.
void defineMethods(torch::jit::Module& module, const std::string& text, const std::string& file,
                   int firstLine) {
  auto source = std::make_shared<torch::jit::Source>(text, file, static_cast<size_t>(firstLine));
  torch::jit::Parser parser(source);
  std::vector<torch::jit::Def> defs;
  std::vector<torch::jit::ResolverPtr> resolvers;
  const auto resolver = std::make_shared<ZooResolver>();
  while (parser.lexer().cur().kind != torch::jit::TK_EOF) {
    defs.emplace_back(parser.parseFunction(/*is_method=*/true));
    resolvers.push_back(resolver);
  }
  const torch::jit::SimpleSelf self(module.type());
  module._ivalue()->compilation_unit()->define(module.type()->name(), {}, {}, defs, resolvers,
                                               &self);
}

}  // namespace

ModuleFactory::ModuleFactory(std::string ns, std::string file,
                             std::map<std::string, ClassSource> sources)
    : ns_(std::move(ns)),
      file_(std::move(file)),
      sources_(std::move(sources)),
      cu_(std::make_shared<torch::jit::CompilationUnit>()) {
}

torch::jit::Module ModuleFactory::create(const std::string& cls) {
  auto it = types_.find(cls);
  torch::jit::Module m = it != types_.end()
                             ? torch::jit::Module(cu_, it->second)
                             : torch::jit::Module(c10::QualifiedName(ns_ + "." + cls), cu_);
  types_.emplace(cls, m.type());
  m.register_attribute("training", c10::BoolType::get(), true);
  return m;
}

torch::jit::Module ModuleFactory::finish(torch::jit::Module module, const std::string& cls) {
  if (!defined_[cls]) {
    auto src = sources_.find(cls);
    // The builder and its embedded model file disagree: a bug of the zoo, not of a session.
    TORCH_INTERNAL_ASSERT(src != sources_.end(), "zoo model file ", file_, " has no class ", cls,
                          ", which its builder defines");
    defineMethods(module, src->second.text, file_, src->second.firstLine);
    defined_[cls] = true;
  }
  return module;
}

void ModuleFactory::param(torch::jit::Module& module, const std::string& name,
                          torch::Tensor value) {
  module.register_parameter(name, std::move(value), /*is_buffer=*/false);
}

void ModuleFactory::attr(torch::jit::Module& module, const std::string& name, int64_t value) {
  module.register_attribute(name, c10::IntType::get(), value);
}

void ModuleFactory::attr(torch::jit::Module& module, const std::string& name, double value) {
  module.register_attribute(name, c10::FloatType::get(), value);
}

void ModuleFactory::attr(torch::jit::Module& module, const std::string& name, bool value) {
  module.register_attribute(name, c10::BoolType::get(), value);
}

torch::jit::Module ModuleFactory::sequential(
    const std::vector<std::pair<std::string, torch::jit::Module>>& chain) {
  // Each chain has its own type (its submodules' types differ), so the name is mangled.
  torch::jit::Module m(c10::QualifiedName(ns_ + ".Sequential"), cu_, /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), true);
  std::string src = "def forward(self, x: Tensor) -> Tensor:\n";
  for (const auto& [name, child] : chain) {
    m.register_module(name, child);
    src += "    x = getattr(self, \"" + name + "\").forward(x)\n";
  }
  src += "    return x\n";
  m.define(src);
  return m;
}

}  // namespace symtune::zoo
