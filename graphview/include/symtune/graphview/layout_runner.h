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
#include <map>
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
  void cancel() { answered_ = ++generation_; }
  // Whether the newest request is still to be answered (laidOut or failed). Results a newer
  // request drops do not count: until 2026-12-07 a slow layout given up for a cached view kept
  // the runner busy, and a search waiting for the layout to centre its node waited for it.
  bool busy() const { return answered_ != generation_; }

 Q_SIGNALS:
  void started();
  void laidOut(const symtune::graphview::LaidOutView& result);
  void failed(const QString& message);

 private:
  // One layout on the worker: of `dot`, for the request numbered `generation` (raised when a
  // later request asks for the same DOT text while it waits or runs).
  struct Job {
    std::string dot;
    std::atomic<unsigned> generation{0};
  };
  std::shared_ptr<const DotLayout> cached(const std::string& dot);
  void remember(const std::string& dot, std::shared_ptr<const DotLayout> layout);
  void start(const std::shared_ptr<Job>& job);
  void answer(unsigned generation, std::shared_ptr<const DotLayout> layout, double seconds,
              bool cached, const QString& error);

  QThreadPool pool_;
  std::atomic<unsigned> generation_{0};
  unsigned answered_ = 0;                  // the newest request answered (or cancelled)
  std::shared_ptr<const ViewDot> newest_;  // the newest request's view
  std::map<std::string, std::shared_ptr<Job>> running_;  // by DOT text: waiting or running
  std::list<std::pair<std::string, std::shared_ptr<const DotLayout>>> cache_;  // newest first
};

}  // namespace symtune::graphview
Q_DECLARE_METATYPE(symtune::graphview::LaidOutView)
