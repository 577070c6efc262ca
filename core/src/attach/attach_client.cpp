#include "symtune/core/attach_client.h"

#include <array>
#include <chrono>

#include <asio.hpp>

namespace symtune::attach {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct Client::Impl {
  asio::io_context io;
  asio::generic::stream_protocol::socket socket{io};
  FrameDecoder decoder{kMaxServerFrameBytes};
  std::array<char, 65536> buffer{};
  bool open = false;

  // Reads once, waiting until `deadline`; false on timeout. Throws Disconnected at the end of
  // the stream.
  bool readSome(Clock::time_point deadline) {
    bool done = false;
    asio::error_code error;
    size_t got = 0;
    socket.async_read_some(asio::buffer(buffer), [&](const asio::error_code& ec, size_t n) {
      done = true;
      error = ec;
      got = n;
    });
    io.restart();
    io.run_until(deadline);
    if (!done) {
      asio::error_code ignored;
      socket.cancel(ignored);
      io.restart();
      io.run();  // the cancelled read completes
      if (got > 0)
        decoder.feed(buffer.data(), got);
      return got > 0;
    }
    if (error) {
      open = false;
      throw Disconnected(error == asio::error::eof ? "the server closed the connection"
                                                   : "the connection failed: " + error.message());
    }
    decoder.feed(buffer.data(), got);
    return true;
  }

  // The next message by `deadline`, or nothing.
  std::optional<nlohmann::json> next(Clock::time_point deadline) {
    if (!open)
      throw Disconnected("not connected");
    while (true) {
      if (auto m = decoder.next())
        return m;
      if (Clock::now() >= deadline || !readSome(deadline)) {
        if (auto m = decoder.next())
          return m;
        return std::nullopt;
      }
    }
  }
};

Client::Client() : impl_(std::make_unique<Impl>()) {
}

Client::~Client() {
  close();
}

nlohmann::json Client::connect(const std::string& endpointText, const std::string& token,
                               double timeoutSeconds) {
  close();
  impl_ = std::make_unique<Impl>();
  pending_.clear();
  const Endpoint e = parseEndpoint(endpointText);
  auto& impl = *impl_;
  asio::error_code ec;
  if (e.kind == Endpoint::Kind::Unix) {
    const asio::local::stream_protocol::endpoint local(e.path);
    impl.socket.connect(asio::generic::stream_protocol::endpoint(local), ec);
  } else {
    const asio::ip::tcp::endpoint tcp(asio::ip::make_address(e.host, ec), e.port);
    if (!ec)
      impl.socket.connect(asio::generic::stream_protocol::endpoint(tcp), ec);
  }
  if (ec)
    throw std::runtime_error("cannot connect to " + e.text() + ": " + ec.message());
  impl.open = true;
  const auto deadline = Clock::now() + seconds(timeoutSeconds);
  auto hello = impl.next(deadline);
  if (!hello)
    throw std::runtime_error(e.text() + ": no hello from the server within the timeout");
  if ((*hello)["type"] != "hello")
    throw ProtocolError("the server's first message is not a hello: " + hello->dump());
  nlohmann::json answer = {{"type", "hello"}, {"protocol", kProtocolVersion}};
  if (!token.empty())
    answer["token"] = token;
  send(answer);
  while (true) {
    auto m = impl.next(deadline);
    if (!m)
      throw std::runtime_error(e.text() + ": no welcome from the server within the timeout");
    if ((*m)["type"] == "welcome")
      return *hello;
    if ((*m)["type"] == "error") {
      impl.open = false;
      throw Disconnected("refused: " + m->value("reason", std::string("no reason given")));
    }
  }
}

std::optional<nlohmann::json> Client::next(double timeoutSeconds) {
  if (!pending_.empty()) {
    auto m = std::move(pending_.front());
    pending_.pop_front();
    return m;
  }
  return impl_->next(Clock::now() + seconds(timeoutSeconds));
}

nlohmann::json Client::command(nlohmann::json command, double timeoutSeconds) {
  const int64_t id = nextId_++;
  command["type"] = "command";
  command["id"] = id;
  send(command);
  const auto deadline = Clock::now() + seconds(timeoutSeconds);
  while (true) {
    auto m = impl_->next(deadline);
    if (!m)
      throw std::runtime_error("no answer to command " + command.value("command", std::string()) +
                               " within the timeout");
    const auto& type = (*m)["type"];
    if ((type == "ack" || type == "error") && m->contains("id") && (*m)["id"] == id)
      return *m;
    pending_.push_back(std::move(*m));
  }
}

void Client::send(const nlohmann::json& message) {
  sendBytes(encodeFrame(message));
}

void Client::sendBytes(const std::string& bytes) {
  if (!impl_->open)
    throw Disconnected("not connected");
  asio::error_code ec;
  asio::write(impl_->socket, asio::buffer(bytes), ec);
  if (ec) {
    impl_->open = false;
    throw Disconnected("cannot send: " + ec.message());
  }
}

void Client::close() {
  if (impl_ && impl_->socket.is_open()) {
    asio::error_code ignored;
    impl_->socket.shutdown(asio::socket_base::shutdown_both, ignored);
    impl_->socket.close(ignored);
  }
  if (impl_)
    impl_->open = false;
}

bool Client::connected() const {
  return impl_ && impl_->open;
}

}  // namespace symtune::attach
