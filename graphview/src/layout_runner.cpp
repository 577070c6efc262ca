#include "symtune/graphview/layout_runner.h"

#include <QMetaObject>

#include <exception>

namespace symtune::graphview {

namespace {
constexpr size_t kCachedLayouts = 16;
}

LayoutRunner::LayoutRunner(QObject* parent) : QObject(parent) {
  pool_.setMaxThreadCount(1);
}

LayoutRunner::~LayoutRunner() {
  generation_ = generation_ + 1;  // results still coming are dropped
  pool_.clear();
  pool_.waitForDone();
}

std::shared_ptr<const DotLayout> LayoutRunner::cached(const std::string& dot) {
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->first == dot) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().second;
    }
  }
  return nullptr;
}

void LayoutRunner::remember(const std::string& dot, std::shared_ptr<const DotLayout> layout) {
  cache_.emplace_front(dot, std::move(layout));
  if (cache_.size() > kCachedLayouts)
    cache_.pop_back();
}

void LayoutRunner::request(ViewDot view) {
  const unsigned generation = ++generation_;
  auto shared = std::make_shared<const ViewDot>(std::move(view));
  ++pending_;
  Q_EMIT started();
  if (auto layout = cached(shared->dot)) {
    // Delivered from the event loop like a computed one, so callers see one behaviour.
    QMetaObject::invokeMethod(
        this,
        [this, generation, shared, layout] {
          --pending_;
          if (generation == generation_)
            Q_EMIT laidOut({shared, layout, 0.0, true});
        },
        Qt::QueuedConnection);
    return;
  }
  pool_.start([this, generation, shared] {
    if (generation != generation_) {  // a newer request came while this one waited
      QMetaObject::invokeMethod(
          this, [this] { --pending_; }, Qt::QueuedConnection);
      return;
    }
    QElapsedTimer timer;
    timer.start();
    std::shared_ptr<const DotLayout> layout;
    QString error;
    try {
      layout = std::make_shared<const DotLayout>(layoutDot(QString::fromStdString(shared->dot)));
    } catch (const LayoutError& e) {
      error = QString::fromUtf8(e.what());
    } catch (const std::exception& e) {  // out of memory on a huge graph: the studio lives on
      error = QString::fromUtf8(e.what());
    }
    const double seconds = static_cast<double>(timer.nsecsElapsed()) * 1e-9;
    // ~LayoutRunner waits for this job, and Qt drops events posted to a destroyed object.
    QMetaObject::invokeMethod(
        this,
        [this, generation, shared, layout, seconds, error] {
          --pending_;
          if (layout)
            remember(shared->dot, layout);
          if (generation != generation_)
            return;
          if (layout)
            Q_EMIT laidOut({shared, layout, seconds, false});
          else
            Q_EMIT failed(error);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace symtune::graphview
