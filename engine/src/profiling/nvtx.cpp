#include "symtune/profiling/nvtx.h"

#include <atomic>
#include <mutex>
#include <stdexcept>

#include <ATen/record_function.h>

#ifdef SYMTUNE_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace symtune::nvtx {

namespace {

std::atomic<bool> gEnabled{false};

#ifdef SYMTUNE_HAVE_NVTX
nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("Symtune");
  return d;
}

void push(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &a);
}

void pop() {
  nvtxDomainRangePop(domain());
}

// Autograd functions as ranges: they run on the engine's threads, outside the evaluator.
struct BackwardRange : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> onBackwardStart(const at::RecordFunction& fn) {
  if (!gEnabled.load(std::memory_order_relaxed))
    return nullptr;
  push(fn.name());
  return std::make_unique<BackwardRange>();
}

void onBackwardEnd(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (ctx != nullptr)
    pop();
}

std::mutex gCallbackMutex;
at::CallbackHandle gCallback = 0;
#endif

}  // namespace

std::optional<std::string> unavailableReason() {
#ifdef SYMTUNE_HAVE_NVTX
  return std::nullopt;
#else
  return std::string("this build has no NVTX (it needs the CUDA toolkit's nvtx3 headers)");
#endif
}

void setEnabled(bool on) {
#ifdef SYMTUNE_HAVE_NVTX
  std::lock_guard<std::mutex> lock(gCallbackMutex);
  if (on && gCallback == 0) {
    gCallback = at::addGlobalCallback(at::RecordFunctionCallback(&onBackwardStart, &onBackwardEnd)
                                          .scopes({at::RecordScope::BACKWARD_FUNCTION}));
  } else if (!on && gCallback != 0) {
    at::removeCallback(gCallback);
    gCallback = 0;
  }
  gEnabled.store(on);
#else
  if (on)
    throw std::runtime_error("NVTX ranges are unavailable: " + *unavailableReason());
  gEnabled.store(false);
#endif
}

bool enabled() {
  return gEnabled.load(std::memory_order_relaxed);
}

Range::Range(const char* name) {
#ifdef SYMTUNE_HAVE_NVTX
  if (enabled()) {
    push(name);
    open_ = true;
  }
#else
  (void)name;
#endif
}

Range::~Range() {
#ifdef SYMTUNE_HAVE_NVTX
  if (open_)
    pop();
#endif
}

}  // namespace symtune::nvtx
