#pragma once
// Lays out views off the GUI thread: one worker (Graphviz runs one layout at a time anyway, Note
// [Graphviz lock]), the newest request wins — a request made while another is waiting or running
// makes the older one's result be dropped — and layouts are cached by their DOT text, so going
// back to a view seen before is immediate and a live run never lays out again for changed
// figures.
//
//   LayoutRunner runner;
//   connect(&runner, &LayoutRunner::laidOut, this, [](const LaidOutView& v) { ... });
//   runner.request(model.view());

#include <QElapsedTimer>
#include <QObject>
#include <QThreadPool>

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "symtune/graphview/dot_layout.h"
#include "symtune/graphview/view_dot.h"

namespace symtune::graphview {

struct LaidOutView {
  std::shared_ptr<const ViewDot> view;
  std::shared_ptr<const DotLayout> layout;
  double seconds = 0;  // Graphviz's time (0 when cached)
  bool cached = false;
};

class LayoutRunner : public QObject {
  Q_OBJECT

 public:
  explicit LayoutRunner(QObject* parent = nullptr);
  ~LayoutRunner() override;  // waits for a running layout

  void request(ViewDot view);
  // The result of the request made last is dropped, as a newer request would drop it.
  void cancel() { ++generation_; }
  bool busy() const { return pending_ > 0; }

 Q_SIGNALS:
  void started();
  void laidOut(const symtune::graphview::LaidOutView& result);
  void failed(const QString& message);

 private:
  std::shared_ptr<const DotLayout> cached(const std::string& dot);
  void remember(const std::string& dot, std::shared_ptr<const DotLayout> layout);

  QThreadPool pool_;
  std::atomic<unsigned> generation_{0};
  int pending_ = 0;
  std::list<std::pair<std::string, std::shared_ptr<const DotLayout>>> cache_;  // newest first
};

}  // namespace symtune::graphview
Q_DECLARE_METATYPE(symtune::graphview::LaidOutView)
