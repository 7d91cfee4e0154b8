#include "engine/data/loader.h"

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <utility>

#include "engine/base/error.h"
#include "engine/graph/rng.h"
#include "engine/io/mapped_file.h"

namespace crumb::data {

namespace {

// One sample's crop-flip draw (Augment).
struct Shift {
  int dy = 0, dx = 0;
  bool flip = false;
};

Shift draw(Rng& rng, const Augment& a) {
  const int span = 2 * a.pad + 1;
  Shift s;
  s.dy = int(rng.below(span)) - a.pad;
  s.dx = int(rng.below(span)) - a.pad;
  s.flip = a.flip && (rng() & 1);
  return s;
}

// The normalised value of element v of channel c, computed in O (float or double).
template <class O> struct FromU8 {
  const O* lut;
  O operator()(int c, uint8_t v) const { return lut[c * 256 + v]; }
};
template <class O> struct FromF32 {
  const float *mean, *std;
  O operator()(int c, float v) const { return (O(v) - O(mean[c])) / O(std[c]); }
};

// One sample, c x h x w at p, normalised into dst; shifted and mirrored by s when augmenting, a 0 pixel
// filling in.
template <class T, class O, class Value>
void put_sample(const T* p, O* dst, int channels, int h, int w, bool augment, Shift s, Value value) {
  const int plane = h * w;
  if (!augment) {
    for (int c = 0; c < channels; ++c)
      for (int j = c * plane; j < (c + 1) * plane; ++j) dst[j] = value(c, p[j]);
    return;
  }
  for (int c = 0; c < channels; ++c)
    for (int r = 0; r < h; ++r)
      for (int q = 0; q < w; ++q) {
        const int sr = r + s.dy, sq = (s.flip ? w - 1 - q : q) + s.dx;
        const bool inside = sr >= 0 && sr < h && sq >= 0 && sq < w;
        dst[c * plane + r * w + q] = value(c, inside ? p[c * plane + sr * w + sq] : T(0));
      }
}

}  // namespace

Loader::Loader(const Dataset& ds, int batch_size, Normalization norm, const LoaderOptions& options)
    : ds_(ds), batch_size_(batch_size), shuffle_(options.shuffle), seed_(options.seed),
      drop_last_(options.drop_last), memory_(options.memory), dtype_(options.dtype), micro_(batch_size) {
  CRUMB_CHECK(batch_size > 0, "Loader: batch_size must be > 0, got ", batch_size);
  CRUMB_CHECK(dtype_ == DType::F32 || dtype_ == DType::F64, "Loader: writes float32 or float64 images, not ",
              dtype_name(dtype_));
  const std::size_t norms = norm.mean.size();
  CRUMB_CHECK(norms == norm.std.size() && (norms == 1 || norms == std::size_t(ds.channels)),
              "Loader: normalisation has ", norm.mean.size(), " means and ", norm.std.size(),
              " stds for images of ", ds.channels, " channels (give one pair, or one per channel)");
  for (float s : norm.std) CRUMB_CHECK(s > 0.f, "Loader: normalisation std must be > 0, got ", s);
  CRUMB_CHECK(ds.count >= 0 && ds.sample_size() > 0, "Loader: dataset has count ", ds.count,
              " and sample shape ", ds.channels, "x", ds.height, "x", ds.width);
  const std::size_t pixels = ds.mapped.data ? size_t(ds.count) * ds.sample_size() : ds.pixels.size();
  CRUMB_CHECK(pixels == size_t(ds.count) * ds.sample_size() && ds.labels.size() == size_t(ds.count),
              "Loader: dataset of ", ds.count, " samples of ", ds.sample_size(), " pixels holds ", pixels,
              " pixels and ", ds.labels.size(), " labels");
  lut_.resize(256 * std::size_t(std::max(ds.channels, 1)));
  if (dtype_ == DType::F64) lut64_.resize(lut_.size());
  for (int c = 0; c < ds.channels; ++c) {
    const std::size_t k = norms == 1 ? 0 : c;
    for (int p = 0; p < 256; ++p) lut_[c * 256 + p] = (float(p) / 255.f - norm.mean[k]) / norm.std[k];
    if (dtype_ == DType::F64)
      for (int p = 0; p < 256; ++p)
        lut64_[c * 256 + p] = (p / 255.0 - double(norm.mean[k])) / double(norm.std[k]);
    mean_.push_back(norm.mean[k]);
    std_.push_back(norm.std[k]);
  }
  order_.resize(ds.count);
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

BatchShare Loader::share_of(int batch) const {
  return batch_share(std::min(batch_size_, ds_.count - batch * batch_size_), ranks_, rank_, group_);
}

int Loader::parts_of(int batch) const { return (share_of(batch).size + micro_ - 1) / micro_; }

Loader::Part Loader::first_part_from(int batch) const {
  for (; batch < batches_per_epoch(); ++batch)
    if (parts_of(batch) > 0) return {batch, 0};
  return {};
}

Loader::Part Loader::after(Part p) const {
  return p.k + 1 < parts_of(p.batch) ? Part{p.batch, p.k + 1} : first_part_from(p.batch + 1);
}

void Loader::wait_idle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return requested_.batch < 0 && !busy_; });
}

void Loader::set_augment(Augment a) {
  CRUMB_CHECK(a.pad >= 0 && a.pad <= 1024, "Loader: augmentation padding must be in [0, 1024], got ", a.pad);
  std::unique_lock<std::mutex> lock(mu_);
  wait_idle(lock);  // the worker reads augment_ while it fills
  augment_ = a;
}

void Loader::set_micro_batch(int m, int rank, int ranks, int group) {
  CRUMB_CHECK(m >= 1 && ranks >= 1 && rank >= 0 && rank < ranks, "Loader: micro-batch ", m, " for rank ", rank,
              " of ", ranks, " (need m >= 1 and 0 <= rank < ranks)");
  std::unique_lock<std::mutex> lock(mu_);
  wait_idle(lock);  // the worker reads the split while it fills
  micro_ = m;
  rank_ = rank;
  ranks_ = ranks;
  group_ = group;
  started_ = false;  // what was prefetched is split the old way
}

void Loader::start_epoch(int epoch, int first_batch) {
  CRUMB_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), "Loader: epoch ", epoch, " has ",
              batches_per_epoch(), " batches, cannot start at batch ", first_batch);
  std::unique_lock<std::mutex> lock(mu_);
  // order_ and both slots are about to change; the worker must not be reading them.
  wait_idle(lock);
  // Slots for the micro-batch size, allocated when it changes (set-up, never per batch).
  const int capacity = std::max(1, std::min(micro_, ds_.count));
  if (capacity != slot_capacity_) {
    for (int s = 0; s < 2; ++s) xbuf_[s] = Buffer(), ybuf_[s] = Buffer();  // never two sizes held at once
    for (int s = 0; s < 2; ++s) {
      xbuf_[s] = Buffer(size_t(capacity) * ds_.sample_size() * dtype_size(dtype_), memory_);
      ybuf_[s] = Buffer(size_t(capacity) * sizeof(int32_t), memory_);
      slot_data_[s][0] = xbuf_[s].data();
      slot_data_[s][1] = ybuf_[s].data();
    }
    slot_capacity_ = capacity;
  }
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle_) {
    Rng rng(Rng(seed_)() + uint64_t(epoch));
    // Fisher-Yates; the modulo bias is below 2^-32 for any dataset that fits in memory.
    for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng() % i]);
  }
  started_ = true;
  failure_ = nullptr;
  rng_batch_ = -1;
  ready_slot_ = consumer_slot_ = -1;
  held_ = {};
  batch_ = -1;
  next_batch_ = first_batch;
  pending_ = first_part_from(first_batch);
  if (pending_.batch >= 0) {
    requested_ = pending_;
    fill_slot_ = 0;
    lock.unlock();
    cv_.notify_all();
  }
}

// Hands part p to the caller (its slot becomes consumer_slot_) and requests the one after it into the
// other slot, which the caller has just given up. A part other than the one pending (the caller skipped
// micro-batches) is filled first.
void Loader::take(std::unique_lock<std::mutex>& lock, Part p) {
  if (!(pending_ == p)) {
    wait_idle(lock);
    requested_ = pending_ = p;
    fill_slot_ = 0;
    ready_slot_ = consumer_slot_ = -1;
    failure_ = nullptr;  // the skipped part's
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return ready_slot_ >= 0; });
  if (failure_) {
    // The part could not be assembled (its file changed): the epoch ends here, start_epoch() starts over.
    ready_slot_ = consumer_slot_ = -1;
    pending_ = held_ = {};
    batch_ = -1;
    started_ = false;
    std::rethrow_exception(std::exchange(failure_, nullptr));
  }
  consumer_slot_ = ready_slot_;
  ready_slot_ = -1;
  held_ = p;
  pending_ = after(p);
  if (pending_.batch >= 0) {
    requested_ = pending_;
    fill_slot_ = 1 - consumer_slot_;
    cv_.notify_all();
  }
}

bool Loader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  CRUMB_CHECK(started_, "Loader: call start_epoch() before next()");
  if (next_batch_ >= batches_per_epoch()) return false;
  batch_ = next_batch_++;
  streamed_ = 0;
  out = Batch{};
  out.size = std::min(batch_size_, ds_.count - batch_ * batch_size_);
  out.index = batch_;
  const int parts = parts_of(batch_);
  // The first micro-batch is the caller's from here, so the worker moves on to the second.
  if (parts > 0) take(lock, {batch_, 0});
  if (parts == 1) {
    if (dtype_ == DType::F64)
      out.x64 = static_cast<const double*>(slot_data_[consumer_slot_][0]);
    else
      out.x = static_cast<const float*>(slot_data_[consumer_slot_][0]);
    out.y = static_cast<const int32_t*>(slot_data_[consumer_slot_][1]);
  }
  return true;
}

void Loader::start(int first, int count, int m) {
  std::unique_lock<std::mutex> lock(mu_);
  CRUMB_CHECK(started_ && batch_ >= 0, "Loader: call next(Batch&) before streaming a batch");
  const BatchShare share = share_of(batch_);
  // The scheduler's micro-batches must be the loader's: the same m, or the whole share in one.
  CRUMB_CHECK(first == share.offset && count == share.size && (m == micro_ || count <= std::min(m, micro_)),
              "Loader: holds samples [", share.offset, ", ", share.offset + share.size, ") of batch ", batch_,
              " in micro-batches of ", micro_, ", but samples [", first, ", ", first + count,
              ") were asked for in micro-batches of ", m, " (set_micro_batch: the scheduler's micro-batch and rank)");
  if (!(held_ == Part{batch_, 0})) take(lock, {batch_, 0});  // streamed before: from its start again
  streamed_ = 0;
}

const void* const* Loader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  CRUMB_CHECK(batch_ >= 0 && streamed_ < parts_of(batch_), "Loader: batch ", batch_, " has ",
              batch_ >= 0 ? parts_of(batch_) : 0, " micro-batches, all streamed already");
  if (streamed_ > 0) take(lock, {batch_, streamed_});
  ++streamed_;
  return slot_data_[consumer_slot_];
}

void Loader::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || requested_.batch >= 0; });
    if (stop_) return;
    const Part part = requested_;
    const int slot = fill_slot_;
    requested_ = {};
    busy_ = true;
    lock.unlock();
    // An error (a mapped file cut short) goes to the caller, in take().
    std::exception_ptr failure;
    try {
      const bool f32 = ds_.pixel_type() == PixelType::F32;
      if (dtype_ == DType::F64) {
        if (f32) fill<double>(slot, part, static_cast<const float*>(ds_.samples()));
        else fill<double>(slot, part, static_cast<const uint8_t*>(ds_.samples()));
      } else {
        if (f32) fill<float>(slot, part, static_cast<const float*>(ds_.samples()));
        else fill<float>(slot, part, static_cast<const uint8_t*>(ds_.samples()));
      }
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    failure_ = failure;
    ready_slot_ = slot;
    cv_.notify_all();
  }
}

// Runs on the worker without the lock: it only touches slot `slot`, which the caller does not read
// until the handshake hands it over, and order_, which start_epoch() changes only while idle. Samples in a
// file's map are copied under its guard (MappedFile::read): a file cut short is an error, not a SIGBUS.
template <class O, class T>
void Loader::fill(int slot, Part part, const T* pixels) {
  const int sample = ds_.sample_size();
  const BatchShare share = share_of(part.batch);
  const int first = share.offset + part.k * micro_;  // in the batch
  const int size = std::min(micro_, share.size - part.k * micro_);
  const int begin = part.batch * batch_size_ + first;
  O* x = reinterpret_cast<O*>(xbuf_[slot].data());
  int32_t* y = reinterpret_cast<int32_t*>(ybuf_[slot].data());
  const bool augment = augment_.pad > 0 || augment_.flip;
  // A sample's draws follow those of the samples before it in its batch, whoever assembles them.
  if (augment && !(rng_batch_ == part.batch && rng_at_ == first)) {
    rng_ = Rng(Rng(seed_ ^ 0xa5a5a5a5ull)() + uint64_t(epoch_) * 1000003u + uint64_t(part.batch));
    for (int i = 0; i < first; ++i) draw(rng_, augment_);
  }
  // Plain reads and writes only (MappedFile::read's rule): a failed read leaves it by siglongjmp.
  auto assemble = [&] {
    for (int i = 0; i < size; ++i) {
      const int src = order_[begin + i];
      const T* p = pixels + size_t(src) * sample;
      O* dst = x + size_t(i) * sample;
      const Shift s = augment ? draw(rng_, augment_) : Shift{};
      if constexpr (!std::is_same_v<T, uint8_t>)
        put_sample(p, dst, ds_.channels, ds_.height, ds_.width, augment, s, FromF32<O>{mean_.data(), std_.data()});
      else if constexpr (std::is_same_v<O, double>)
        put_sample(p, dst, ds_.channels, ds_.height, ds_.width, augment, s, FromU8<double>{lut64_.data()});
      else
        put_sample(p, dst, ds_.channels, ds_.height, ds_.width, augment, s, FromU8<float>{lut_.data()});
      y[i] = ds_.labels[src];
    }
  };
  if (ds_.mapped.file)
    ds_.mapped.file->read(assemble);
  else
    assemble();
  rng_batch_ = part.batch;
  rng_at_ = first + size;
}

}  // namespace crumb::data
