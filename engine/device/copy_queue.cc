#include "engine/device/copy_queue.h"

#include <cstring>

#include "engine/base/error.h"

namespace crumb {

ThreadCopyQueue::ThreadCopyQueue(int tickets)
    : ring_(static_cast<std::size_t>(std::max(tickets, 1))),
      started_(ring_.size(), 0),
      done_(ring_.size(), 0),
      thread_([this] { copy_loop(); }) {}

ThreadCopyQueue::~ThreadCopyQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queued_.notify_one();
  thread_.join();
}

void ThreadCopyQueue::start(int ticket, void* dst, const void* src, std::size_t bytes) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    CRUMB_CHECK(ticket >= 0 && static_cast<std::size_t>(ticket) < ring_.size(), "copy queue: ticket ", ticket,
                " is out of range");
    // Only after a run that failed half-way can a ticket's copy still be in flight: let it finish.
    finished_.wait(lock, [&] { return done_[ticket] == started_[ticket]; });
    ring_[tail_++ % ring_.size()] = {ticket, dst, src, bytes};
    ++started_[ticket];
  }
  queued_.notify_one();
}

void ThreadCopyQueue::wait(int ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  CRUMB_CHECK(ticket >= 0 && static_cast<std::size_t>(ticket) < ring_.size(), "copy queue: ticket ", ticket,
              " is out of range");
  finished_.wait(lock, [&] { return done_[ticket] == started_[ticket]; });
}

void ThreadCopyQueue::copy_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    queued_.wait(lock, [&] { return stop_ || head_ < tail_; });
    if (head_ == tail_) return;  // stopping, and nothing left to copy
    const Job job = ring_[head_ % ring_.size()];
    lock.unlock();
    std::memcpy(job.dst, job.src, job.bytes);
    lock.lock();
    ++head_;
    ++done_[job.ticket];
    finished_.notify_all();
  }
}

}  // namespace crumb
