// Asynchronous copies between the arena and the host pool, the means of swapping (engine/strategy/swap.h). Each
// copy has a ticket: start() queues it behind all work enqueued so far on the device, wait() holds the work
// enqueued after it until that copy is done. Copies run one at a time in the order they were started,
// so a copy into host memory always lands before a later copy reads it back. CUDA runs them on the
// backend's copy stream with events; the CPU on a thread of its own (memcpy), so the same schedule runs,
// and is tested, on machines without a GPU.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace crumb {

class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  // ticket in [0, tickets): at most one copy per ticket is in flight.
  virtual void start(int ticket, void* dst, const void* src, std::size_t bytes) = 0;
  virtual void wait(int ticket) = 0;
};

// The CPU's queue: one copy thread. Starting never allocates (a ring of one slot per ticket).
class ThreadCopyQueue final : public CopyQueue {
 public:
  explicit ThreadCopyQueue(int tickets);
  ~ThreadCopyQueue() override;
  void start(int ticket, void* dst, const void* src, std::size_t bytes) override;
  void wait(int ticket) override;

 private:
  struct Job {
    int ticket;
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  void copy_loop();

  std::mutex mu_;
  std::condition_variable queued_, finished_;
  std::vector<Job> ring_;
  std::size_t head_ = 0, tail_ = 0;            // jobs taken, jobs queued (ever)
  std::vector<uint64_t> started_, done_;       // per ticket: copies started and finished
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace crumb
