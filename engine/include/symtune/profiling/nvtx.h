#pragma once
// NVTX ranges in Symtune's vocabulary, so that an Nsight Systems capture of a run reads as steps,
// phases and graph nodes (domain "Symtune"):
//   step 12 > forward > #7 aten::conv2d layer1.0.conv1 ... > backward > ConvolutionBackward0 ...
// Steps and their phases come from the trainer, forward nodes from SyMuGen's evaluator (the steps
// it runs: every step of the segments executor; measured steps of the TorchScript one), backward
// functions from an at::RecordFunction callback installed while ranges are on.
//
// Off unless turned on (the session's run.nvtx, --nvtx): each range then costs a call into the
// NVTX library, which does nothing unless a tool (nsys) injected itself. nvtx3 is header-only
// (the CUDA toolkit's); a build without it (SYMTUNE_HAVE_NVTX unset) keeps the switch and says
// why ranges are unavailable.
//
//   nvtx::setEnabled(true);
//   { nvtx::Range step("step 12"); ... }

#include <optional>
#include <string>

namespace symtune::nvtx {

// Why ranges cannot be emitted by this build, or nullopt when they can.
std::optional<std::string> unavailableReason();

// Turns ranges on or off for the process; turning them on where unavailable throws
// std::runtime_error with the reason.
void setEnabled(bool on);
bool enabled();

// A range on the calling thread, open from construction to destruction; nothing when ranges are
// off. The name is copied.
class Range {
 public:
  explicit Range(const char* name);
  explicit Range(const std::string& name) : Range(name.c_str()) {}
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  bool open_ = false;
};

}  // namespace symtune::nvtx
