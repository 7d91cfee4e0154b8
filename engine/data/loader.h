// Batch loader: a background thread assembles the next batch (gather by shuffled index, convert to
// normalised float) while the current one trains. Two preallocated batch buffers (pinned host memory
// when a GPU copies from them, so those copies run asynchronously); no allocation per batch. Each
// epoch's order comes from (seed, epoch), so runs are reproducible.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/device/buffer.h"
#include "engine/data/dataset.h"

namespace crumb::data {

struct Batch {
  const float* x = nullptr;      // [size, channels, height, width], normalised
  const int32_t* y = nullptr;    // [size]
  int size = 0;                  // samples in this batch (the last batch of an epoch may be short)
  int index = 0;                 // batch index within the epoch
};

// Training-time augmentation, applied while a batch is assembled (torchvision's RandomCrop(size,
// padding=pad) then RandomHorizontalFlip()): each sample is shifted by dy, dx in [-pad, pad] with zero
// pixels filling in, and mirrored with probability 1/2 when flip is set. Drawn from (seed, epoch, batch,
// sample), so a run is reproducible whatever the threads' timing.
struct Augment {
  int pad = 0;
  bool flip = false;
};

class Loader {
 public:
  // shuffle=false keeps dataset order (evaluation). drop_last=false keeps a short final batch.
  // memory: where the batch buffers live (Memory::Pinned when a GPU reads the batches).
  Loader(const Dataset& ds, int batch_size, Normalization norm, bool shuffle, uint64_t seed,
         bool drop_last = false, Memory memory = Memory::Host);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Augments the batches of epochs started from now on (none by default).
  void set_augment(Augment a);
  // Starts epoch `epoch` (0-based) at batch first_batch (a resumed run skips the batches it trained:
  // orders and augmentation depend only on (seed, epoch, batch)); prefetching begins immediately.
  void start_epoch(int epoch, int first_batch = 0);
  // Returns the next batch of the current epoch, or false at the end of the epoch. The returned
  // pointers stay valid until the next call to next() or start_epoch().
  bool next(Batch& out);
  int batches_per_epoch() const;

 private:
  void worker();
  void fill(int slot, int batch_index);
  void wait_idle(std::unique_lock<std::mutex>& lock);

  const Dataset& ds_;
  int batch_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  Augment augment_;
  int epoch_ = 0;
  std::vector<float> lut_;         // [channel][byte]: the normalised value of each pixel byte
  std::vector<int> order_;         // sample indices of the current epoch
  Buffer xbuf_[2];  // float [batch_size, sample]
  Buffer ybuf_[2];  // int32 [batch_size]
  int slot_size_[2] = {0, 0};
  // Handshake between the caller and the worker, all guarded by mu_. The worker only ever writes
  // the slot the caller is not reading, so the caller's batch stays valid while the next one fills.
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;     // start_epoch() has been called
  int requested_ = -1;       // batch index the worker should fill next, -1 = none
  int fill_slot_ = 0;        // slot that request goes into
  bool busy_ = false;        // the worker is filling a slot right now
  int ready_slot_ = -1;      // slot holding a filled, not yet returned batch, -1 = none
  int consumer_slot_ = -1;   // slot the caller is reading
  int next_batch_ = 0;       // next batch index next() returns
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace crumb::data
