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
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->first == dot) {  // laid out twice (asked again while it ran): one entry
      cache_.erase(it);
      break;
    }
  }
  cache_.emplace_front(dot, std::move(layout));
  if (cache_.size() > kCachedLayouts)
    cache_.pop_back();
}

// Note [One layout per DOT text]
// A request for a view whose layout is waiting or running (asked for, left for another view, and
// asked for again) starts no second one: the job takes the new request's number and answers it.
// Until 2026-12-07 such a request laid the view out again behind the first, for as long again.
void LayoutRunner::request(ViewDot view) {
  const unsigned generation = ++generation_;
  newest_ = std::make_shared<const ViewDot>(std::move(view));
  Q_EMIT started();
  if (auto layout = cached(newest_->dot)) {
    // Delivered from the event loop like a computed one, so callers see one behaviour.
    QMetaObject::invokeMethod(
        this, [this, generation, layout] { answer(generation, layout, 0.0, true, {}); },
        Qt::QueuedConnection);
    return;
  }
  if (auto it = running_.find(newest_->dot); it != running_.end()) {
    it->second->generation = generation;
    return;
  }
  auto job = std::make_shared<Job>();
  job->dot = newest_->dot;
  job->generation = generation;
  running_.emplace(job->dot, job);
  start(job);
}

void LayoutRunner::start(const std::shared_ptr<Job>& job) {
  pool_.start([this, job] {
    if (job->generation != generation_) {  // a newer request came while this one waited
      QMetaObject::invokeMethod(
          this,
          [this, job] {
            running_.erase(job->dot);
            // Asked for again after the worker let it go: it runs after all.
            if (job->generation == generation_) {
              running_.emplace(job->dot, job);
              start(job);
            }
          },
          Qt::QueuedConnection);
      return;
    }
    QElapsedTimer timer;
    timer.start();
    std::shared_ptr<const DotLayout> layout;
    QString error;
    try {
      layout = std::make_shared<const DotLayout>(layoutDot(QString::fromStdString(job->dot)));
    } catch (const LayoutError& e) {
      error = QString::fromUtf8(e.what());
    } catch (const std::exception& e) {  // out of memory on a huge graph: the studio lives on
      error = QString::fromUtf8(e.what());
    }
    const double seconds = static_cast<double>(timer.nsecsElapsed()) * 1e-9;
    // ~LayoutRunner waits for this job, and Qt drops events posted to a destroyed object.
    QMetaObject::invokeMethod(
        this,
        [this, job, layout, seconds, error] {
          running_.erase(job->dot);
          if (layout)
            remember(job->dot, layout);
          answer(job->generation, layout, seconds, false, error);
        },
        Qt::QueuedConnection);
  });
}

void LayoutRunner::answer(unsigned generation, std::shared_ptr<const DotLayout> layout,
                          double seconds, bool cached, const QString& error) {
  if (generation != generation_)
    return;  // a newer request drops it
  answered_ = generation;
  if (layout)
    Q_EMIT laidOut({newest_, std::move(layout), seconds, cached});
  else
    Q_EMIT failed(error);
}

}  // namespace symtune::graphview
