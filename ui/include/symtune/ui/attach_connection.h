#pragma once
// The studio's connection to an attachable run (docs/protocol.md): a worker thread runs the attach
// client and hands every message to the GUI thread as a signal, so the GUI never waits on the
// network.
//
//   auto* connection = new AttachConnection(this);
//   connect(connection, &AttachConnection::messageReceived, this, &View::onMessage);
//   connection->open("unix:/run/user/1000/symtune/runner-42.sock");
//   int id = connection->sendCommand({{"command", "pause"}});  // commandAnswered(id, ack)

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <QJsonObject>
#include <QObject>
#include <QString>

namespace symtune::ui {

class AttachConnection : public QObject {
  Q_OBJECT

 public:
  explicit AttachConnection(QObject* parent = nullptr);
  ~AttachConnection() override;  // closes the connection and joins the worker

  // Connects in the background; attached() or disconnected() says how it went.
  void open(const QString& endpoint, const QString& token = {});
  void close();
  const QString& endpoint() const { return endpoint_; }
  bool isAttached() const { return attached_; }

  // Sends a command ({"command": NAME, arguments}, docs/protocol.md) from any thread; returns its
  // id, which commandAnswered() carries with the ack or error. Returns 0 and sends nothing when
  // no run is attached.
  int sendCommand(QJsonObject command);

 Q_SIGNALS:
  void attached(const QJsonObject& hello);                 // the server's hello: protocol, run, ...
  void messageReceived(const QJsonObject& message);        // graph, rules, state, step, nodes, ...
  void commandAnswered(int id, const QJsonObject& reply);  // an ack, or an error with a reason
  void disconnected(const QString& reason);                // refused, or the run went away

 private:
  QString endpoint_;
  std::thread worker_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> attached_{false};
  std::atomic<int> nextId_{1};
  std::mutex outboxMutex_;
  std::vector<QJsonObject> outbox_;  // commands for the worker to send
};

}  // namespace symtune::ui
