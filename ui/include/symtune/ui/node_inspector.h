#pragma once
// The node inspector dock: the selected node's properties and live statistics
// (NodeInspectorModel) and a sparkline of its time per sampled step.

#include <QWidget>

#include "symtune/core/ids.h"

class QLabel;
class QStackedWidget;
class QTreeView;

namespace symtune::ui {

class NodeInspectorModel;
class Sparkline;

class NodeInspector : public QWidget {
  Q_OBJECT

 public:
  explicit NodeInspector(QWidget* parent = nullptr);

  // Owned by the inspector: give it the graph and the `nodes` messages.
  NodeInspectorModel* model() const { return model_; }
  Sparkline* sparkline() const { return sparkline_; }
  QTreeView* view() const { return view_; }

  // An invalid id (or one the graph lacks) shows the empty state.
  void showNode(NodeId id);
  // Whether the empty-state text is showing instead of a node.
  bool isShowingEmptyState() const;

 private:
  void refresh();

  NodeInspectorModel* model_;
  QStackedWidget* pages_;
  QLabel* empty_;
  QTreeView* view_;
  Sparkline* sparkline_;
};

}  // namespace symtune::ui
