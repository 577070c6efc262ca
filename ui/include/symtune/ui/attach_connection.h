#pragma once
// The studio's connection to an attachable run (docs/protocol.md): a worker thread runs the attach
// client, decodes every message into its typed value (symtune/core/attach_messages.h) and hands it
// to the GUI thread as a signal, so the GUI never waits on the network nor reads JSON.
//
//   auto* connection = new AttachConnection(this);
//   connect(connection, &AttachConnection::messageReceived, this, &View::onMessage);
//   connection->open("unix:/run/user/1000/symtune/runner-42.sock");
//   int id = connection->sendCommand(attach::Command::named("pause"));  // commandAnswered(id, ack)

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <QMetaType>
#include <QObject>
#include <QString>

#include "symtune/core/attach_messages.h"
#include "symtune/core/attach_protocol.h"

namespace symtune::ui {

class AttachConnection : public QObject {
  Q_OBJECT

 public:
  explicit AttachConnection(QObject* parent = nullptr);
  ~AttachConnection() override;  // closes the connection and joins the worker (within ~50 ms)

  // Connects in the background; attached() or disconnected() says how it went.
  void open(const QString& endpoint, const QString& token = {});
  void close();
  const QString& endpoint() const { return endpoint_; }
  bool isAttached() const { return attached_; }

  // Sends a command (docs/protocol.md, "Commands") from any thread; returns its id, which
  // commandAnswered() carries with the ack or error. Returns 0 and sends nothing when no run is
  // attached.
  int sendCommand(attach::Command command);

 Q_SIGNALS:
  void attached(const symtune::attach::HelloMessage& hello);  // the server's hello: the run
  // graph, rules, state, step, nodes, dropped, and errors that answer no command.
  void messageReceived(const symtune::attach::ServerMessage& message);
  void commandAnswered(int id, const symtune::attach::ReplyMessage& reply);  // ack or error
  void disconnected(const QString& reason);  // refused, a broken message, or the run went away

 private:
  QString endpoint_;
  std::thread worker_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> attached_{false};
  std::atomic<int> nextId_{1};
  std::mutex outboxMutex_;
  std::vector<attach::Command> outbox_;  // commands for the worker to send
};

}  // namespace symtune::ui

Q_DECLARE_METATYPE(symtune::attach::HelloMessage)
Q_DECLARE_METATYPE(symtune::attach::ServerMessage)
Q_DECLARE_METATYPE(symtune::attach::ReplyMessage)
