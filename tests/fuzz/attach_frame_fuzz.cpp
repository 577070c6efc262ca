// Fuzz target for the attach protocol's decoder (core/src/attach/attach_protocol.cpp): any bytes,
// fed in two pieces split where the first byte says, must either decode into messages or throw
// ProtocolError — never crash, hang or read out of bounds — and every decoded message must
// re-encode into a frame that decodes back to the same message. Commands are checked as the
// server checks them.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "symtune/core/attach_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace symtune::attach;
  if (size == 0)
    return 0;
  const size_t split = data[0] % size;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  FrameDecoder decoder(kMaxClientFrameBytes);
  try {
    decoder.feed(bytes, std::min(split, n));
    for (int pass = 0; pass < 2; ++pass) {
      while (auto message = decoder.next()) {
        try {
          parseCommand(*message);
        } catch (const ProtocolError&) {
        }
        const std::string frame = encodeFrame(*message);
        FrameDecoder again(UINT32_MAX);
        again.feed(frame.data(), frame.size());
        auto back = again.next();
        if (!back || *back != *message)
          std::abort();  // a message that does not survive its own encoding
      }
      if (pass == 0 && split < n)
        decoder.feed(bytes + split, n - split);
    }
  } catch (const ProtocolError&) {
  }
  return 0;
}
