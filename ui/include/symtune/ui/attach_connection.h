#pragma once
// The studio's connection to an attachable run (docs/protocol.md): a worker thread runs the attach
// client and hands every message to the GUI thread as a signal, so the GUI never waits on the
// network.
//
//   auto* connection = new AttachConnection(this);
//   connect(connection, &AttachConnection::messageReceived, this, &View::onMessage);
//   connection->open("unix:/run/user/1000/symtune/runner-42.sock");

#include <atomic>
#include <thread>

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

 Q_SIGNALS:
  void attached(const QJsonObject& hello);           // the server's hello: protocol, run, ...
  void messageReceived(const QJsonObject& message);  // graph, rules, state, step, nodes, ...
  void disconnected(const QString& reason);          // refused, or the run went away

 private:
  QString endpoint_;
  std::thread worker_;
  std::atomic<bool> stop_{false};
};

}  // namespace symtune::ui
