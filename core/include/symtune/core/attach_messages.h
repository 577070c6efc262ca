#pragma once
// The attach protocol's server messages as typed values (docs/protocol.md, "Server messages"):
// the runner encodes them, the studio decodes them, both with the functions here, so a field has
// one name and one type on both ends and nothing re-parses text.
//
//   attach::ServerMessage m = attach::decodeServerMessage(json);   // throws ProtocolError
//   if (const auto* step = std::get_if<attach::StepMessage>(&m)) chart(step->features);

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "symtune/core/binding_table.h"
#include "symtune/core/features.h"
#include "symtune/core/graph.h"

namespace symtune::attach {

struct HelloMessage {
  int64_t protocol = 0;
  std::string engine;  // the runner's Symtune version
  std::string auth;    // "none" or "token"
  // The run: its session's name and the model's description; `run` holds every field the server
  // sent (session_path, parameters, batch_size, device, steps; "embedded" for an AttachedLoop).
  std::string session, model;
  nlohmann::json run;
};

// The model's graph; `error` instead when the run has none (a model without IR).
struct GraphMessage {
  std::shared_ptr<const Graph> graph;
  std::string error;
};

struct RuleState {
  std::string name;
  bool enabled = false;
  std::string origin;  // "builtin", a pack's path, "this run", ...
  std::string description;
};
struct RulesMessage {
  std::vector<RuleState> rules;  // in order
};

struct StateMessage {
  std::string state;  // training, paused, finished, stopped
};

struct StepMessage {
  int64_t step = 0;
  double loss = 0;  // NaN when the loss was not finite
  double seconds = 0;
  StepFeatures features;  // NaN where the run sent null
  std::vector<std::string> rulesInForce, rulesFired;
  bool skipped = false;
  int64_t coalesced = 0;  // earlier steps this one stands for (the client fell behind)
};

// One name of GPU activity a node launched (a kernel, "Memcpy HtoD", "Memset").
struct NodeKernelFigures {
  std::string name;
  std::string kind;  // "kernel", "memcpy", "memset"
  bool backward = false;
  int64_t calls = 0;
  double seconds = 0;
};

struct NodeFigures {
  int32_t node = -1;  // the forward node's id in the graph
  int64_t calls = 0, backwardCalls = 0;
  double forwardSeconds = 0, backwardSeconds = 0;
  // CUDA runs: the GPU's time (kernel time with GPU activity, else CUDA events)
  std::optional<double> forwardDeviceSeconds, backwardDeviceSeconds;
  int64_t bytesAllocated = 0, backwardBytesAllocated = 0;                 // every device
  std::optional<int64_t> cudaBytesAllocated, backwardCudaBytesAllocated;  // CUDA runs
  std::optional<int64_t> liveBytesAfter;
  // GPU activity (CUPTI): kernels launched forward and backward, and the most costly names.
  std::optional<int64_t> kernels, backwardKernels;  // backwardKernels: the backward's share
  std::vector<NodeKernelFigures> kernelList;
};
struct ParameterNorm {
  std::string name;
  double gradNorm = 0;  // NaN when not finite
};
struct NodesMessage {
  int64_t step = 0;
  std::vector<NodeFigures> nodes;
  double attributedSeconds = 0, unattributedSeconds = 0;
  std::vector<ParameterNorm> parameters;
};

// DynaCompiler's binding table as it stands (docs/binding.md); `error` instead when the table the
// runner sent cannot be read.
struct BindingsMessage {
  std::shared_ptr<const BindingTable> table;
  std::string error;
};

struct DroppedMessage {
  int64_t nodes = 0;  // per-node updates this client lost
};

// An ack or an error. An error without an id refuses the handshake or a frame.
struct ReplyMessage {
  bool ok = false;
  std::optional<int64_t> id;
  std::string command;    // ack: the command's name
  std::string reason;     // error: why
  nlohmann::json result;  // ack: the command's result fields (state, from_step, session, ...)
};

using ServerMessage =
    std::variant<HelloMessage, GraphMessage, RulesMessage, StateMessage, StepMessage, NodesMessage,
                 BindingsMessage, DroppedMessage, ReplyMessage>;

// Decodes one server message. Throws ProtocolError naming the message type and the field that is
// missing or of the wrong type, and for a type this protocol version does not have; a graph that
// does not read as one (GraphFormatError) becomes a GraphMessage with `error` set.
ServerMessage decodeServerMessage(const nlohmann::json& message);

// The JSON the runner sends (each with its "type").
nlohmann::json encode(const StepMessage& m);
nlohmann::json encode(const NodesMessage& m);
nlohmann::json encode(const RulesMessage& m);
nlohmann::json encode(const BindingTable& table);  // a "bindings" message

}  // namespace symtune::attach
