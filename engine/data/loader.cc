#include "engine/data/loader.h"

#include <algorithm>
#include <numeric>

#include "engine/base/error.h"
#include "engine/graph/rng.h"

namespace crumb::data {

Loader::Loader(const Dataset& ds, int batch_size, Normalization norm, bool shuffle, uint64_t seed,
               bool drop_last, Memory memory)
    : ds_(ds), batch_size_(batch_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  CRUMB_CHECK(batch_size > 0, "Loader: batch_size must be > 0, got ", batch_size);
  const std::size_t norms = norm.mean.size();
  CRUMB_CHECK(norms == norm.std.size() && (norms == 1 || norms == std::size_t(ds.channels)),
              "Loader: normalisation has ", norm.mean.size(), " means and ", norm.std.size(),
              " stds for images of ", ds.channels, " channels (give one pair, or one per channel)");
  for (float s : norm.std) CRUMB_CHECK(s > 0.f, "Loader: normalisation std must be > 0, got ", s);
  CRUMB_CHECK(ds.count >= 0 && ds.sample_size() > 0, "Loader: dataset has count ", ds.count,
              " and sample shape ", ds.channels, "x", ds.height, "x", ds.width);
  CRUMB_CHECK(ds.pixels.size() == size_t(ds.count) * ds.sample_size() &&
                  ds.labels.size() == size_t(ds.count),
              "Loader: dataset of ", ds.count, " samples of ", ds.sample_size(), " pixels holds ",
              ds.pixels.size(), " pixels and ", ds.labels.size(), " labels");
  lut_.resize(256 * std::size_t(std::max(ds.channels, 1)));
  for (int c = 0; c < ds.channels; ++c) {
    const std::size_t k = norms == 1 ? 0 : c;
    for (int p = 0; p < 256; ++p) lut_[c * 256 + p] = (float(p) / 255.f - norm.mean[k]) / norm.std[k];
  }
  order_.resize(ds.count);
  for (int s = 0; s < 2; ++s) {
    xbuf_[s] = Buffer(size_t(batch_size) * ds.sample_size() * sizeof(float), memory);
    ybuf_[s] = Buffer(size_t(batch_size) * sizeof(int32_t), memory);
  }
  thread_ = std::thread(&Loader::worker, this);
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int Loader::batches_per_epoch() const {
  return drop_last_ ? ds_.count / batch_size_ : (ds_.count + batch_size_ - 1) / batch_size_;
}

void Loader::wait_idle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return requested_ < 0 && !busy_; });
}

void Loader::set_augment(Augment a) {
  CRUMB_CHECK(a.pad >= 0 && a.pad <= 1024, "Loader: augmentation padding must be in [0, 1024], got ", a.pad);
  std::unique_lock<std::mutex> lock(mu_);
  wait_idle(lock);  // the worker reads augment_ while it fills
  augment_ = a;
}

void Loader::start_epoch(int epoch, int first_batch) {
  CRUMB_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), "Loader: epoch ", epoch, " has ",
              batches_per_epoch(), " batches, cannot start at batch ", first_batch);
  std::unique_lock<std::mutex> lock(mu_);
  // order_ and both slots are about to change; the worker must not be reading them.
  wait_idle(lock);
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle_) {
    Rng rng(Rng(seed_)() + uint64_t(epoch));
    // Fisher-Yates; the modulo bias is below 2^-32 for any dataset that fits in memory.
    for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng() % i]);
  }
  started_ = true;
  ready_slot_ = consumer_slot_ = -1;
  next_batch_ = first_batch;
  if (first_batch < batches_per_epoch()) {
    requested_ = first_batch;
    fill_slot_ = 0;
    lock.unlock();
    cv_.notify_all();
  }
}

bool Loader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  CRUMB_CHECK(started_, "Loader: call start_epoch() before next()");
  if (next_batch_ >= batches_per_epoch()) return false;
  // Requests are issued in order, so the one slot that becomes ready holds batch next_batch_.
  cv_.wait(lock, [&] { return ready_slot_ >= 0; });
  consumer_slot_ = ready_slot_;
  ready_slot_ = -1;
  const int batch = next_batch_++;
  if (next_batch_ < batches_per_epoch()) {
    requested_ = next_batch_;
    fill_slot_ = 1 - consumer_slot_;
  }
  const int slot = consumer_slot_;
  lock.unlock();
  cv_.notify_all();
  out.x = reinterpret_cast<const float*>(xbuf_[slot].data());
  out.y = reinterpret_cast<const int32_t*>(ybuf_[slot].data());
  out.size = slot_size_[slot];
  out.index = batch;
  return true;
}

void Loader::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || requested_ >= 0; });
    if (stop_) return;
    const int batch = requested_, slot = fill_slot_;
    requested_ = -1;
    busy_ = true;
    lock.unlock();
    fill(slot, batch);
    lock.lock();
    busy_ = false;
    ready_slot_ = slot;
    cv_.notify_all();
  }
}

// Runs on the worker without the lock: it only touches slot `slot`, which the caller does not read
// until the handshake hands it over, and order_, which start_epoch() changes only while idle.
void Loader::fill(int slot, int batch_index) {
  const int sample = ds_.sample_size();
  const int begin = batch_index * batch_size_;
  const int size = std::min(batch_size_, ds_.count - begin);
  float* x = reinterpret_cast<float*>(xbuf_[slot].data());
  int32_t* y = reinterpret_cast<int32_t*>(ybuf_[slot].data());
  const int h = ds_.height, w = ds_.width, plane = h * w;
  const bool augment = augment_.pad > 0 || augment_.flip;
  Rng rng(Rng(seed_ ^ 0xa5a5a5a5ull)() + uint64_t(epoch_) * 1000003u + uint64_t(batch_index));
  for (int i = 0; i < size; ++i) {
    const int src = order_[begin + i];
    const uint8_t* p = &ds_.pixels[size_t(src) * sample];
    float* dst = x + size_t(i) * sample;
    if (!augment) {
      for (int c = 0; c < ds_.channels; ++c) {
        const float* lut = lut_.data() + c * 256;
        for (int j = c * plane; j < (c + 1) * plane; ++j) dst[j] = lut[p[j]];
      }
    } else {
      const int span = 2 * augment_.pad + 1;
      const int dy = int(rng.below(span)) - augment_.pad, dx = int(rng.below(span)) - augment_.pad;
      const bool flip = augment_.flip && (rng() & 1);
      for (int c = 0; c < ds_.channels; ++c) {
        const float* lut = lut_.data() + c * 256;
        for (int r = 0; r < h; ++r)
          for (int q = 0; q < w; ++q) {
            const int sr = r + dy, sq = (flip ? w - 1 - q : q) + dx;
            const bool inside = sr >= 0 && sr < h && sq >= 0 && sq < w;
            dst[c * plane + r * w + q] = lut[inside ? p[c * plane + sr * w + sq] : 0];  // padding is a 0 pixel
          }
      }
    }
    y[i] = ds_.labels[src];
  }
  slot_size_[slot] = size;
}

}  // namespace crumb::data
