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
#include <utility>
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

// A step held to a memory budget (docs/remat.md): what the rematerializer planned and what the
// step held. Bytes above what was live when the step began.
struct StepRemat {
  std::optional<double> budgetBytes;    // none: not enforced (a calibrating step)
  std::optional<double> predictedPeak;  // with the plan; none before the predictor saw a step
  double peakBytes = 0;
  std::vector<std::string> recomputed;  // the units the step recomputed
  int64_t attempts = 0;                 // retries after running out of the budget
  bool cached = false;                  // the bucket's plan, reused
  std::string note;  // what the run did about the budget, when it had to (a budget it gave up)
};

// How a step ran (docs/control.md): its configuration and, under the online controller, the
// decision that chose it.
struct ControlAlternative {
  std::string configuration;
  double predictedSamplesPerSecond = 0;
};
struct StepControl {
  int64_t microbatches = 1;   // as the step ran (a split step: more than configured)
  std::string configuration;  // "microbatches 2, threads 1, remat_budget 0.5"
  // The configuration's knob values ("microbatches", "remat_budget", "threads": those it sets),
  // decoded in the order of their names.
  std::vector<std::pair<std::string, double>> knobs;
  // Under the online controller: its decision for the step.
  bool decided = false;
  double predictedSamplesPerSecond = 0;    // the model's mean, before the step (0: no model yet)
  std::optional<double> samplesPerSecond;  // measured (none: the step taught it nothing)
  bool explored = false;
  std::vector<ControlAlternative> alternatives;  // the next best by the model's mean
  // The batch's signals (feature name, value); why the chosen beat the first alternative (what,
  // factor on the predicted samples per second), largest first; the constraint the step broke;
  // the configuration the draw chose that conservative exploration held back, and why.
  std::vector<std::pair<std::string, double>> batchSignals;
  std::vector<std::pair<std::string, double>> drivers;
  std::string violation;
  std::string heldBack;
  // Whether the step's time made the model believe the configuration's speed had moved.
  bool levelMoved = false;
  // The knobs kept at a value because on this step it changes nothing (knob, value).
  std::vector<std::pair<std::string, double>> idle;
};

struct StepMessage {
  int64_t step = 0;
  double loss = 0;  // NaN when the loss was not finite
  double seconds = 0;
  StepFeatures features;  // NaN where the run sent null
  std::vector<std::string> rulesInForce, rulesFired;
  bool skipped = false;
  int64_t coalesced = 0;               // earlier steps this one stands for (the client fell behind)
  std::optional<StepRemat> remat;      // runs held to a memory budget
  std::optional<StepControl> control;  // runs with a control block
};

// The run's configuration space and how it is controlled (docs/control.md): each knob with its
// values, the value it is at, what limits it, and the value it is pinned at.
struct KnobState {
  std::string name;
  std::vector<double> values;
  double current = 0;
  std::string constraint;
  std::optional<double> pinned;
};
struct ControlMessage {
  std::string mode;  // "fixed", "online", "tuned"
  std::vector<KnobState> knobs;
  // The configurations a broken constraint excluded (the online controller's), as text, in the
  // order excluded.
  std::vector<std::string> excluded;
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

// The rematerializer's plan in force (docs/remat.md, "The studio"): each unit a plan can
// recompute, the graph nodes it covers and whether the plan recomputes it, and the budget.
struct RematUnitState {
  std::string name;
  std::string parent;          // the top-level block a loop lies in; "" for a block
  std::vector<int32_t> nodes;  // its nodes in the graph (forward ids)
  double savedBytes = 0;       // what it saves for backward by the templates (the last bucket's)
  bool recomputed = false;
};
struct RematMessage {
  int64_t step = 0;                      // the step the plan was last used on
  std::string strategy;                  // "plan" or "checkpoint"
  std::optional<double> budgetBytes;     // the last step's budget (none while calibrating)
  std::optional<double> budgetMb;        // as set: in megabytes (10^6 bytes) ...
  std::optional<double> budgetFraction;  // ... or as a share of the plain peak
  std::vector<RematUnitState> units;
};

// The latest validation on the held-out samples (data.validation_fraction): after which step,
// on how many samples, the mean loss, top-1 and top-5 accuracy (absent: not a class-index loss,
// or five classes or fewer for top-5).
struct ValidationMessage {
  int64_t step = 0, samples = 0;
  double loss = 0;
  std::optional<double> top1, top5;
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

using ServerMessage = std::variant<HelloMessage, GraphMessage, RulesMessage, StateMessage,
                                   StepMessage, NodesMessage, BindingsMessage, RematMessage,
                                   ControlMessage, ValidationMessage, DroppedMessage, ReplyMessage>;

// Decodes one server message. Throws ProtocolError naming the message type and the field that is
// missing or of the wrong type, and for a type this protocol version does not have; a graph that
// does not read as one (GraphFormatError) becomes a GraphMessage with `error` set.
ServerMessage decodeServerMessage(const nlohmann::json& message);

// The JSON the runner sends (each with its "type").
nlohmann::json encode(const StepMessage& m);
nlohmann::json encode(const NodesMessage& m);
nlohmann::json encode(const RulesMessage& m);
nlohmann::json encode(const BindingTable& table);  // a "bindings" message
nlohmann::json encode(const RematMessage& m);
nlohmann::json encode(const ControlMessage& m);
nlohmann::json encode(const ValidationMessage& m);

}  // namespace symtune::attach
