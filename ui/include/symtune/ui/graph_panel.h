#pragma once
// The Graph panel: the forward view (TorchScript IR with its control flow) and the backward view
// (the autograd graph) side by side, linked — selecting a forward op marks the autograd nodes it
// created, and the reverse — with the overlay switch, search (Ctrl+F), zoom to fit, expand and
// collapse, and export to SVG or PNG.

#include <QWidget>

#include <memory>

#include "symtune/core/attach_messages.h"
#include "symtune/core/graph.h"
#include "symtune/graphview/overlay.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QSplitter;

namespace symtune::graphview {
class GraphModel;
class GraphScene;
}  // namespace symtune::graphview

namespace symtune::ui {

class GraphView;

class GraphPanel : public QWidget {
  Q_OBJECT

 public:
  explicit GraphPanel(QWidget* parent = nullptr);
  ~GraphPanel() override;

  void setGraph(std::shared_ptr<const Graph> graph);
  const std::shared_ptr<const Graph>& graph() const;
  // A `nodes` message's payload, and the step's peak memory (for the memory overlay's shares).
  void addNodeStats(const attach::NodesMessage& nodes);
  void setPeakMemory(double bytes);

  // DynaCompiler's binding table (null clears), for the Binding overlay.
  void setBindings(const BindingTable* table);
  // The memory budget's plan in force (null clears), for the Remat plan overlay.
  void setRemat(const attach::RematMessage* plan);
  // Forgets what a run painted beyond its node statistics: its binding table, its remat plan and
  // its peak memory (a session's graph shown after the run has ended is not that run's).
  void clearRunFigures();
  // Selects forward op `node` (expanding the groups that hide it) and centres it.
  void showForwardNode(NodeId node);

  void setOverlay(graphview::Overlay overlay);
  graphview::Overlay overlay() const;

  // Search: selects the next node (after the current match) whose kind, module path or name
  // contains `text`, in the view that has focus (the forward one by default). Returns the number
  // of matches and says "2 of 7" beside the search field.
  int findNext(const QString& text);
  void focusSearch();
  void zoomToFit();
  // Writes the focused view as SVG or PNG (by the file's extension); "" or the error.
  QString exportTo(const QString& path);

  graphview::GraphModel* forwardModel() const { return forwardModel_; }
  graphview::GraphModel* backwardModel() const { return backwardModel_; }
  graphview::GraphScene* forwardScene() const { return forwardScene_; }
  graphview::GraphScene* backwardScene() const { return backwardScene_; }
  GraphView* forwardView() const { return forwardView_; }
  GraphView* backwardView() const { return backwardView_; }

 Q_SIGNALS:
  void nodeSelected(symtune::NodeId node);  // either view; none when cleared
  void overlayChanged(symtune::graphview::Overlay overlay);
  void statusMessage(const QString& message);  // for the main window's status bar

 private:
  void link(graphview::GraphScene* from, graphview::GraphScene* to, GraphView* toView,
            NodeId selected);
  GraphView* focusedView() const;
  void selectAndCentre(GraphView* view, NodeId target);

  graphview::GraphModel *forwardModel_, *backwardModel_;
  graphview::GraphScene *forwardScene_, *backwardScene_;
  GraphView *forwardView_, *backwardView_;
  QSplitter* splitter_;
  QComboBox* overlayBox_;
  QLineEdit* search_;
  QLabel* searchStatus_;
  QLabel* emptyState_;
  GraphView* lastFocused_ = nullptr;
  int searchIndex_ = -1;
  QString lastSearch_;
};

}  // namespace symtune::ui
