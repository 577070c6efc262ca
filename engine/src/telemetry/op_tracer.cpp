#include "symtune/op_tracer.h"

#include <algorithm>
#include <chrono>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

namespace symtune {

struct OpTracer::Buffer {
  uint64_t thread = 0;
  std::vector<OpEvent> events;
};

namespace {

std::atomic<uint64_t> gGeneration{1};
std::atomic<OpTracer*> gActive{nullptr};

struct ThreadSlot {
  uint64_t generation = 0;
  OpTracer::Buffer* buffer = nullptr;
};
thread_local ThreadSlot tSlot;

struct StartContext : at::ObserverContext {
  int64_t startNs = 0;
  int64_t step = -1;
};

}  // namespace

// Gives the C-style callbacks access to the tracer's internals.
struct TracerAccess {
  static std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& /*fn*/) {
    OpTracer* tracer = gActive.load(std::memory_order_acquire);
    if (tracer == nullptr)
      return nullptr;
    auto ctx = std::make_unique<StartContext>();
    ctx->step = tracer->step_.load(std::memory_order_relaxed);
    ctx->startNs = OpTracer::nowNs();
    return ctx;
  }

  static void onEnd(const at::RecordFunction& fn, at::ObserverContext* raw) {
    OpTracer* tracer = gActive.load(std::memory_order_acquire);
    auto* ctx = static_cast<StartContext*>(raw);
    if (tracer == nullptr || ctx == nullptr)
      return;
    OpEvent e;
    e.name = fn.name();
    e.startNs = ctx->startNs;
    e.durationNs = OpTracer::nowNs() - ctx->startNs;
    e.sequenceNr = fn.seqNr();
    e.step = ctx->step;
    e.backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
    OpTracer::Buffer& buffer = tracer->bufferForThisThread();
    e.thread = buffer.thread;
    buffer.events.push_back(std::move(e));
  }
};

OpTracer::OpTracer() : generation_(gGeneration.fetch_add(1)) {
}

OpTracer::~OpTracer() {
  stop();
}

int64_t OpTracer::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

OpTracer::Buffer& OpTracer::bufferForThisThread() {
  if (tSlot.generation != generation_) {  // first op of this thread for this tracer
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.push_back(std::make_unique<Buffer>());
    buffers_.back()->thread = buffers_.size();
    tSlot = {generation_, buffers_.back().get()};
  }
  return *tSlot.buffer;
}

void OpTracer::start() {
  if (handle_ != 0)
    return;
  OpTracer* expected = nullptr;
  TORCH_CHECK(gActive.compare_exchange_strong(expected, this),
              "another OpTracer is recording; one at a time");
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&TracerAccess::onStart, &TracerAccess::onEnd)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

void OpTracer::stop() {
  if (handle_ == 0)
    return;
  at::removeCallback(handle_);
  handle_ = 0;
  gActive.store(nullptr, std::memory_order_release);
}

std::vector<OpEvent> OpTracer::takeEvents() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<OpEvent> all;
  for (auto& b : buffers_) {
    all.insert(all.end(), std::make_move_iterator(b->events.begin()),
               std::make_move_iterator(b->events.end()));
    b->events.clear();
  }
  std::sort(all.begin(), all.end(),
            [](const OpEvent& a, const OpEvent& b) { return a.startNs < b.startNs; });
  return all;
}

std::string chromeTrace(const std::vector<OpEvent>& events,
                        const std::vector<CounterSample>& counters) {
  using json = nlohmann::ordered_json;
  int64_t origin = INT64_MAX;
  for (const auto& e : events)
    origin = std::min(origin, e.startNs);
  for (const auto& c : counters)
    origin = std::min(origin, c.timeNs);
  if (origin == INT64_MAX)
    origin = 0;
  auto us = [&](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };

  json list = json::array();
  list.push_back({{"name", "process_name"},
                  {"ph", "M"},
                  {"pid", 1},
                  {"tid", 0},
                  {"args", {{"name", "symtune-runner"}}}});
  for (const auto& e : events) {
    list.push_back({{"name", e.name},
                    {"cat", e.backward ? "backward" : "op"},
                    {"ph", "X"},
                    {"ts", us(e.startNs)},
                    {"dur", static_cast<double>(e.durationNs) / 1000.0},
                    {"pid", 1},
                    {"tid", e.thread},
                    {"args", {{"step", e.step}, {"sequence_nr", e.sequenceNr}}}});
  }
  for (const auto& c : counters) {
    list.push_back({{"name", c.name},
                    {"ph", "C"},
                    {"ts", us(c.timeNs)},
                    {"pid", 1},
                    {"args", {{"value", c.value}}}});
  }
  return json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace symtune
