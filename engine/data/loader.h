// Batch loader: a background thread assembles micro-batches (gather by shuffled index, convert to
// normalised float, augment) into two preallocated slots while the previous one trains: host memory for
// data is two micro-batches (pinned when a GPU copies from them, so those copies run asynchronously),
// whatever the batch size; no allocation per batch. Each epoch's order comes from (seed, epoch) and each
// sample's augmentation from (seed, epoch, batch, its place in the batch), so runs are reproducible and
// do not depend on the micro-batch size nor, in data-parallel runs, on how a batch is shared.
//
// Driving it with the scheduler (engine/train/scheduler.h):
//   loader.set_micro_batch(sched.micro_batch(), rank, ranks);  // before the epoch starts
//   loader.start_epoch(epoch);
//   while (loader.next(b)) sched.train_batch(loader, b.size, key);  // streams b's micro-batches
// Without set_micro_batch a micro-batch is the whole batch, and next() hands it over (Batch::x, y).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/base/tensor.h"
#include "engine/device/buffer.h"
#include "engine/data/dataset.h"
#include "engine/data/micro_batches.h"
#include "engine/dist/batch_share.h"
#include "engine/graph/rng.h"

namespace crumb::data {

struct Batch {
  // This rank's share of the batch, [share, channels, height, width] normalised and [share], when it is one
  // micro-batch (always without set_micro_batch); otherwise null, and the scheduler streams it. The images
  // are at x where the loader writes float32, at x64 where it writes float64 (LoaderOptions::dtype).
  const float* x = nullptr;
  const double* x64 = nullptr;
  const int32_t* y = nullptr;
  int size = 0;                  // samples in this batch over all ranks (the last batch of an epoch may be short)
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

// How a Loader orders and keeps its batches, named where it is built:
//   LoaderOptions::shuffled(seed).dropping_last().in(Memory::Pinned).as(DType::F64), LoaderOptions::in_order().
struct LoaderOptions {
  bool shuffle = false;    // false keeps dataset order (evaluation)
  uint64_t seed = 0;       // of the shuffled order and the augmentation
  bool drop_last = false;  // false keeps a short final batch
  Memory memory = Memory::Host;  // where the micro-batch slots live (Memory::Pinned when a GPU copies from them)
  // The images' dtype, the graph input's: F32, or F64 for a float64 graph (--precision fp64), which also
  // normalises in float64.
  DType dtype = DType::F32;

  static LoaderOptions shuffled(uint64_t seed) {
    LoaderOptions o;
    o.shuffle = true;
    o.seed = seed;
    return o;
  }
  static LoaderOptions in_order(uint64_t seed = 0) {
    LoaderOptions o;
    o.seed = seed;
    return o;
  }
  LoaderOptions dropping_last(bool drop = true) const {
    LoaderOptions o = *this;
    o.drop_last = drop;
    return o;
  }
  LoaderOptions in(Memory m) const {
    LoaderOptions o = *this;
    o.memory = m;
    return o;
  }
  LoaderOptions as(DType images) const {
    LoaderOptions o = *this;
    o.dtype = images;
    return o;
  }
};

// A MicroBatchSource of two inputs, "x" (the images) and "y" (the labels), over the current batch.
class Loader final : public MicroBatchSource {
 public:
  Loader(const Dataset& ds, int batch_size, Normalization norm, const LoaderOptions& options);
  ~Loader() override;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Augments the batches of epochs started from now on (none by default).
  void set_augment(Augment a);
  // Assembles, from the next start_epoch() on, only rank's share of each batch among ranks, in whole groups
  // of `group` samples (engine/dist/batch_share.h), in micro-batches of m samples: the slots then hold m
  // samples each.
  void set_micro_batch(int m, int rank = 0, int ranks = 1, int group = 1);
  // Starts epoch `epoch` (0-based) at batch first_batch (a resumed run skips the batches it trained:
  // orders and augmentation depend only on (seed, epoch, batch)); prefetching begins immediately.
  void start_epoch(int epoch, int first_batch = 0);
  // Moves to the next batch of the current epoch, or returns false at the end of the epoch. The returned
  // pointers stay valid until the next call to next() or start_epoch(); micro-batches of a batch not
  // streamed are skipped. A micro-batch that could not be assembled (its mapped file was truncated or
  // rewritten, engine/io/mapped_file.h) throws its crumb::Error here or in next() below, in the caller's
  // thread, and ends the epoch: start_epoch() must come next.
  bool next(Batch& out);
  int batches_per_epoch() const;

  // MicroBatchSource over the batch next() moved to: start() must ask for this rank's share in
  // micro-batches of set_micro_batch's m.
  std::size_t inputs() const override { return 2; }
  const char* name(std::size_t j) const override { return j == 0 ? "x" : "y"; }
  std::size_t sample_bytes(std::size_t j) const override {
    return j == 0 ? std::size_t(ds_.sample_size()) * dtype_size(dtype_) : sizeof(int32_t);
  }
  void start(int first, int count, int m) override;
  const void* const* next() override;

 private:
  // Micro-batch k of this rank's share of batch `batch`; batch -1: none.
  struct Part {
    int batch = -1, k = 0;
    bool operator==(const Part& o) const { return batch == o.batch && k == o.k; }
  };
  BatchShare share_of(int batch) const;
  int parts_of(int batch) const;
  Part first_part_from(int batch) const;
  Part after(Part p) const;
  void take(std::unique_lock<std::mutex>& lock, Part p);
  void worker();
  // Part p into slot `slot`: pixels of type T (uint8 or float), images of type O (float or double).
  template <class O, class T>
  void fill(int slot, Part p, const T* pixels);
  void wait_idle(std::unique_lock<std::mutex>& lock);

  const Dataset& ds_;
  int batch_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  Memory memory_;
  DType dtype_;
  Augment augment_;
  int micro_ = 0, rank_ = 0, ranks_ = 1, group_ = 1;  // set_micro_batch's (micro_ = batch_size_ without it)
  int epoch_ = 0;
  std::vector<float> lut_;         // [channel][byte]: the normalised value of each uint8 pixel
  std::vector<double> lut64_;      // the same in float64, for float64 images
  std::vector<float> mean_, std_;  // [channel]: the normalisation of float32 samples
  std::vector<int> order_;         // sample indices of the current epoch
  Buffer xbuf_[2];  // dtype_ [micro_, sample]
  Buffer ybuf_[2];  // int32 [micro_]
  int slot_capacity_ = 0;  // samples the slots were allocated for
  const void* slot_data_[2][2] = {};  // per slot: its x and y, as next() hands them out
  // The worker's augmentation draws: rng_ stands at sample rng_at_ of batch rng_batch_ (-1: nowhere), so
  // consecutive micro-batches continue where the last one stopped.
  Rng rng_{0};
  int rng_batch_ = -1, rng_at_ = 0;
  // Handshake between the caller and the worker, all guarded by mu_. The worker only ever writes
  // the slot the caller is not reading, so the caller's micro-batch stays valid while the next one fills.
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;     // start_epoch() has been called
  Part requested_;           // the part the worker should fill next (batch -1: none)
  int fill_slot_ = 0;        // slot that request goes into
  bool busy_ = false;        // the worker is filling a slot right now
  int ready_slot_ = -1;      // slot holding a filled, not yet taken part, -1 = none
  std::exception_ptr failure_;  // why the ready part could not be filled (take() throws it), or null
  Part pending_;             // the part requested, being filled or ready: the next one take() gets
  Part held_;                // the part in consumer_slot_, the caller's
  int consumer_slot_ = -1;   // slot the caller is reading
  int next_batch_ = 0;       // next batch index next() returns
  int batch_ = -1;           // the batch next() returned last, which start() and next() stream
  int streamed_ = 0;         // micro-batches of batch_ handed out by next() since start()
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace crumb::data
