#pragma once
// The attach protocol, version 1 (docs/protocol.md): frames, the messages' shapes, and the frame
// decoder both ends use. Part of symtune::core, so the studio speaks it without LibTorch.
//
//   std::string bytes = symtune::attach::encodeFrame({{"type", "hello"}, {"protocol", 1}});
//   symtune::attach::FrameDecoder decoder(symtune::attach::kMaxClientFrameBytes);
//   decoder.feed(bytes.data(), bytes.size());
//   while (auto message = decoder.next()) { ... }     // throws ProtocolError on a bad frame

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace symtune::attach {

inline constexpr int kProtocolVersion = 1;
// A frame is a 4-byte big-endian payload length, then the payload: one JSON object, UTF-8, with
// a string "type". A server refuses client frames over 1 MiB (commands are small); a client
// accepts server frames up to 64 MiB (a large model's graph).
inline constexpr uint32_t kMaxClientFrameBytes = 1u << 20;
inline constexpr uint32_t kMaxServerFrameBytes = 64u << 20;
// How deep a frame's arrays and objects may nest (a message nests a few levels; a peer's
// thousands would take the stack of whatever walks them).
inline constexpr int kMaxFrameNesting = 64;

// A frame that breaks the protocol: oversized, not JSON, not an object, no "type", a field of
// the wrong type. what() is the reason, one line; the connection that sent it is closed.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The frame of `message` (its compact JSON dump).
std::string encodeFrame(const nlohmann::json& message);

// Reassembles frames from a byte stream fed in pieces of any size.
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t maxFrameBytes) : max_(maxFrameBytes) {}

  void feed(const char* data, size_t size);
  // The next complete message, or nothing until more bytes arrive. Throws ProtocolError (a frame
  // over the size limit, not JSON, nested deeper than kMaxFrameNesting, not an object with a
  // string "type"); after that the decoder stays broken (the stream has lost its framing).
  std::optional<nlohmann::json> next();
  size_t buffered() const { return buffer_.size() - offset_; }

 private:
  uint32_t max_;
  std::string buffer_;
  size_t offset_ = 0;
  bool broken_ = false;
};

// Typed access for message fields, throwing ProtocolError naming the field.
std::string stringField(const nlohmann::json& message, const char* key);
int64_t integerField(const nlohmann::json& message, const char* key);
bool boolField(const nlohmann::json& message, const char* key);

// A client's command (docs/protocol.md, "Commands"), checked: a known name and the arguments it
// needs, of the right types.
struct Command {
  int64_t id = 0;        // echoed in the ack or error
  std::string name;      // toggle_rule, add_rule, remove_rule, set_sampling, set_budget, pin,
                         // pause, resume, snapshot, stop
  std::string rule;      // toggle_rule, remove_rule: the rule's name
  bool enabled = false;  // toggle_rule
  std::string source;    // add_rule: rules in the rule language
  int64_t every = 0;     // set_sampling: per-node statistics every N steps (0: off)
  // set_budget: the memory budget, in megabytes (10^6 bytes) or as a share of the plain peak
  std::optional<double> budgetMb, budgetFraction;
  // pin: the online controller keeps knob `knob` at `value` (none: lets it go)
  std::string knob;
  std::optional<double> value;

  static Command toggleRule(std::string rule, bool enabled);
  static Command addRule(std::string source);
  static Command removeRule(std::string rule);
  static Command setSampling(int64_t every);
  // Exactly one of the two (docs/protocol.md, "set_budget").
  static Command setBudget(std::optional<double> megabytes, std::optional<double> fraction);
  // docs/protocol.md, "pin": `value` none unpins.
  static Command pin(std::string knob, std::optional<double> value);
  static Command named(std::string name);  // pause, resume, snapshot, stop: no arguments
};
Command parseCommand(const nlohmann::json& message);  // throws ProtocolError
// The command's frame payload: {"type": "command", "id", "command", its arguments}.
nlohmann::json encodeCommand(const Command& command);

// The endpoint a server listens on: "unix:/path/to.sock" or "tcp:127.0.0.1:PORT". Throws
// std::invalid_argument for anything else, and for TCP on an address that is not loopback.
struct Endpoint {
  enum class Kind { Unix, Tcp };
  Kind kind = Kind::Unix;
  std::string path;  // Unix
  std::string host;  // Tcp: a loopback address
  uint16_t port = 0;
  std::string text() const;
};
Endpoint parseEndpoint(const std::string& text);
// The default Unix socket: $XDG_RUNTIME_DIR/symtune/runner-<pid>.sock, else
// /tmp/symtune-<uid>/runner-<pid>.sock.
std::string defaultSocketPath();

}  // namespace symtune::attach
