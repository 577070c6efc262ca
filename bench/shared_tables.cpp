// One binding table per model and memory slack for a run's bound modes (Note [One table for the
// run's bound modes] in harness.h).

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "harness.h"
#include "symtune/binding/binder.h"

namespace symtune::bench {

SharedTables::SharedTables()
    : folder_(std::filesystem::temp_directory_path() /
              ("symtune-bench-tables-" + std::to_string(::getpid()))) {
  std::filesystem::create_directories(folder_);
}

SharedTables::~SharedTables() {
  // Its own files, then the folder, by POSIX: LibTorch's library exports a copy of libstdc++'s
  // filesystem code, and its remove_all crashes (tests/common/test_files.h).
  for (const auto& [key, table] : tables_)
    std::remove(table.path.c_str());
  ::rmdir(folder_.c_str());
}

const SharedTables::Table& SharedTables::of(const std::string& model, double memorySlack,
                                            const RunConfig& config) {
  char slack[32];
  std::snprintf(slack, sizeof slack, "%g", memorySlack);
  const std::string key = model + " " + slack;
  if (const auto found = tables_.find(key); found != tables_.end())
    return found->second;

  Session session = benchSession(model, config);
  session.binding.enabled = true;
  session.binding.memorySlack = memorySlack;
  Trainer trainer(session);
  trainer.setTelemetry(Telemetry::Off);
  const binding::Binder* binder = trainer.binder();
  TORCH_CHECK(binder != nullptr, model, ": no binder to measure a shared table with (",
              trainer.bindingNote().value_or("binding off"), ")");
  Table t;
  t.steps = config.warmup + config.steps;
  std::cerr << "  a shared binding table (memory slack " << slack << "): " << t.steps << " steps\n";
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < t.steps; ++i)
    trainer.step();
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  t.table = binder->table();
  t.measurements = binder->measurements();
  t.path = (folder_ / (model + "-slack-" + slack + ".bindings.json")).string();
  t.table.save(t.path);
  return tables_.emplace(key, std::move(t)).first->second;
}

}  // namespace symtune::bench
