#include "symtune/core/attach_protocol.h"

#include <sys/un.h>
#include <unistd.h>

#include <utility>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace symtune::attach {

std::string encodeFrame(const nlohmann::json& message) {
  const std::string payload =
      message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto n = static_cast<uint32_t>(payload.size());
  std::string frame(4, '\0');
  frame[0] = static_cast<char>((n >> 24) & 0xff);
  frame[1] = static_cast<char>((n >> 16) & 0xff);
  frame[2] = static_cast<char>((n >> 8) & 0xff);
  frame[3] = static_cast<char>(n & 0xff);
  return frame + payload;
}

namespace {

// Whether JSON text nests its arrays and objects deeper than `most` (brackets in strings aside).
bool nestsDeeper(const char* text, size_t n, int most) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > most)
        return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

void FrameDecoder::feed(const char* data, size_t size) {
  if (offset_ > 0 && offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  buffer_.append(data, size);
}

std::optional<nlohmann::json> FrameDecoder::next() {
  if (broken_)
    throw ProtocolError("the stream lost its framing after an earlier error");
  if (buffered() < 4)
    return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  const uint32_t n =
      (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
  if (n > max_) {
    broken_ = true;
    throw ProtocolError("frame of " + std::to_string(n) + " bytes is over the limit of " +
                        std::to_string(max_));
  }
  if (buffered() < 4 + size_t{n})
    return std::nullopt;
  const char* payload = buffer_.data() + offset_ + 4;
  offset_ += 4 + size_t{n};
  if (nestsDeeper(payload, n, kMaxFrameNesting)) {
    broken_ = true;
    throw ProtocolError("frame nests deeper than " + std::to_string(kMaxFrameNesting) + " levels");
  }
  nlohmann::json message =
      nlohmann::json::parse(payload, payload + n, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) {
    broken_ = true;
    throw ProtocolError("frame is not JSON");
  }
  if (!message.is_object()) {
    broken_ = true;
    throw ProtocolError("frame is not a JSON object");
  }
  const auto type = message.find("type");
  if (type == message.end() || !type->is_string()) {
    broken_ = true;
    throw ProtocolError("message has no string \"type\"");
  }
  // Keep the buffer from growing without bound on a long stream.
  if (offset_ > (1u << 20) && offset_ * 2 > buffer_.size()) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return message;
}

std::string stringField(const nlohmann::json& message, const char* key) {
  const auto it = message.find(key);
  if (it == message.end() || !it->is_string())
    throw ProtocolError(std::string("\"") + key + "\" must be a string");
  return it->get<std::string>();
}

int64_t integerField(const nlohmann::json& message, const char* key) {
  const auto it = message.find(key);
  if (it == message.end() || !(it->is_number_integer() || it->is_number_unsigned()))
    throw ProtocolError(std::string("\"") + key + "\" must be an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX})
    throw ProtocolError(std::string("\"") + key + "\" is out of range");
  return it->get<int64_t>();
}

bool boolField(const nlohmann::json& message, const char* key) {
  const auto it = message.find(key);
  if (it == message.end() || !it->is_boolean())
    throw ProtocolError(std::string("\"") + key + "\" must be true or false");
  return it->get<bool>();
}

Command parseCommand(const nlohmann::json& message) {
  Command c;
  c.id = integerField(message, "id");
  c.name = stringField(message, "command");
  if (c.name == "toggle_rule") {
    c.rule = stringField(message, "rule");
    c.enabled = boolField(message, "enabled");
  } else if (c.name == "remove_rule") {
    c.rule = stringField(message, "rule");
  } else if (c.name == "add_rule") {
    c.source = stringField(message, "source");
  } else if (c.name == "set_sampling") {
    c.every = integerField(message, "every");
    if (c.every < 0)
      throw ProtocolError("\"every\" must be 0 (off) or a positive number of steps");
  } else if (c.name == "set_budget") {
    const auto positive = [&](const char* key) -> std::optional<double> {
      if (!message.contains(key) || message.at(key).is_null())
        return std::nullopt;
      const auto& v = message.at(key);
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        throw ProtocolError(std::string("\"") + key + "\" must be a number above 0");
      return v.get<double>();
    };
    c.budgetMb = positive("budget_mb");
    c.budgetFraction = positive("budget_fraction");
    if (c.budgetMb.has_value() == c.budgetFraction.has_value())
      throw ProtocolError("set_budget takes one of \"budget_mb\" and \"budget_fraction\"");
    if (c.budgetFraction && *c.budgetFraction > 1)
      throw ProtocolError("\"budget_fraction\" must be in (0, 1]");
    if (c.budgetMb && *c.budgetMb > 1e9)  // as a session's remat.budget_mb
      throw ProtocolError("\"budget_mb\" must be in (0, 1e9]");
  } else if (c.name == "pin") {
    c.knob = stringField(message, "knob");
    if (!message.contains("value"))
      throw ProtocolError("\"value\" is missing (null lets the knob go)");
    const auto& v = message.at("value");
    if (!v.is_null()) {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        throw ProtocolError("\"value\" must be a number, or null to let the knob go");
      c.value = v.get<double>();
    }
  } else if (c.name != "pause" && c.name != "resume" && c.name != "snapshot" && c.name != "stop") {
    throw ProtocolError("unknown command \"" + c.name +
                        "\" (toggle_rule, add_rule, remove_rule, set_sampling, set_budget, pin, "
                        "pause, resume, snapshot, stop)");
  }
  return c;
}

Command Command::toggleRule(std::string rule, bool enabled) {
  Command c = named("toggle_rule");
  c.rule = std::move(rule);
  c.enabled = enabled;
  return c;
}

Command Command::addRule(std::string source) {
  Command c = named("add_rule");
  c.source = std::move(source);
  return c;
}

Command Command::removeRule(std::string rule) {
  Command c = named("remove_rule");
  c.rule = std::move(rule);
  return c;
}

Command Command::setSampling(int64_t every) {
  Command c = named("set_sampling");
  c.every = every;
  return c;
}

Command Command::setBudget(std::optional<double> megabytes, std::optional<double> fraction) {
  Command c = named("set_budget");
  c.budgetMb = megabytes;
  c.budgetFraction = fraction;
  return c;
}

Command Command::pin(std::string knob, std::optional<double> value) {
  Command c = named("pin");
  c.knob = std::move(knob);
  c.value = value;
  return c;
}

Command Command::named(std::string name) {
  Command c;
  c.name = std::move(name);
  return c;
}

nlohmann::json encodeCommand(const Command& c) {
  nlohmann::json out = {{"type", "command"}, {"id", c.id}, {"command", c.name}};
  if (c.name == "toggle_rule") {
    out["rule"] = c.rule;
    out["enabled"] = c.enabled;
  } else if (c.name == "remove_rule") {
    out["rule"] = c.rule;
  } else if (c.name == "add_rule") {
    out["source"] = c.source;
  } else if (c.name == "set_sampling") {
    out["every"] = c.every;
  } else if (c.name == "set_budget") {
    if (c.budgetMb)
      out["budget_mb"] = *c.budgetMb;
    if (c.budgetFraction)
      out["budget_fraction"] = *c.budgetFraction;
  } else if (c.name == "pin") {
    out["knob"] = c.knob;
    out["value"] = c.value ? nlohmann::json(*c.value) : nlohmann::json(nullptr);
  }
  return out;
}

std::string Endpoint::text() const {
  return kind == Kind::Unix ? "unix:" + path : "tcp:" + host + ":" + std::to_string(port);
}

Endpoint parseEndpoint(const std::string& text) {
  Endpoint e;
  if (text.rfind("unix:", 0) == 0) {
    e.kind = Endpoint::Kind::Unix;
    e.path = text.substr(5);
    if (e.path.empty() || e.path[0] != '/')
      throw std::invalid_argument("a Unix endpoint needs an absolute path: unix:/path/to.sock");
    // Asio said only "File name too long", after the server had made the socket's folder.
    constexpr size_t kMostPath = sizeof(sockaddr_un::sun_path) - 1;
    if (e.path.size() > kMostPath)
      throw std::invalid_argument("a Unix socket's path is at most " + std::to_string(kMostPath) +
                                  " bytes, and " + text + " has " + std::to_string(e.path.size()));
    return e;
  }
  if (text.rfind("tcp:", 0) == 0) {
    e.kind = Endpoint::Kind::Tcp;
    const std::string rest = text.substr(4);
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("a TCP endpoint is tcp:HOST:PORT, got \"" + text + "\"");
    e.host = rest.substr(0, colon);
    if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']')
      e.host = e.host.substr(1, e.host.size() - 2);
    const std::string port = rest.substr(colon + 1);
    char* end = nullptr;
    const long n = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || n < 0 || n > 65535)
      throw std::invalid_argument("bad TCP port \"" + port + "\" (0 picks a free one)");
    e.port = static_cast<uint16_t>(n);
    const bool loopback = e.host == "localhost" || e.host == "::1" || e.host.rfind("127.", 0) == 0;
    if (!loopback)
      throw std::invalid_argument("TCP is for loopback only (127.0.0.1 or ::1), got \"" + e.host +
                                  "\": use a Unix socket, or a tunnel, to reach another machine");
    if (e.host == "localhost")
      e.host = "127.0.0.1";
    return e;
  }
  throw std::invalid_argument("an endpoint is unix:/path or tcp:127.0.0.1:PORT, got \"" + text +
                              "\"");
}

std::string defaultSocketPath() {
  const std::string name = "runner-" + std::to_string(::getpid()) + ".sock";
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime)
    return std::string(runtime) + "/symtune/" + name;
  return "/tmp/symtune-" + std::to_string(::getuid()) + "/" + name;
}

}  // namespace symtune::attach
