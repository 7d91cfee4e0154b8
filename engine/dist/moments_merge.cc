#include "engine/dist/moments_merge.h"

#include <algorithm>

#include "engine/device/backend.h"

namespace crumb {

MomentsMerge::MomentsMerge(Executor& e, Communicator& comm) : e_(e), comm_(comm), totals_(e.batch_totals()) {
  std::size_t doubles = 0;
  for (const Executor::BatchTotal& t : totals_) doubles += 3 * static_cast<std::size_t>(t.channels);
  moments_.assign(doubles, 0.0);
  counts_.assign(doubles / 3, 0.0);
  weighted_.assign(doubles / 3, 0.0);
  m2_.assign(doubles / 3, 0.0);
}

void MomentsMerge::merge_and_commit(bool has_samples) {
  if (totals_.empty()) return;
  Backend& b = backend(e_.device(), e_.index());
  // moments_ per total: count[c], mean[c], m2[c]; counts_ and weighted_: count and count * mean per channel.
  std::size_t at = 0, ch = 0;
  for (const Executor::BatchTotal& t : totals_) {
    const std::size_t c = static_cast<std::size_t>(t.channels);
    if (has_samples) b.read_back(moments_.data() + at, t.data, 3 * c * sizeof(double));
    else std::fill_n(moments_.data() + at, 3 * c, 0.0);
    for (std::size_t i = 0; i < c; ++i) {
      counts_[ch + i] = moments_[at + i];
      weighted_[ch + i] = moments_[at + i] * moments_[at + c + i];
    }
    at += 3 * c;
    ch += c;
  }
  comm_.sum_host(counts_.data(), counts_.size());
  comm_.sum_host(weighted_.data(), weighted_.size());
  // Each rank's M2 about the global mean, M2_r + n_r (mean_r - mean)^2, summed: the merged M2.
  at = ch = 0;
  for (const Executor::BatchTotal& t : totals_) {
    const std::size_t c = static_cast<std::size_t>(t.channels);
    for (std::size_t i = 0; i < c; ++i) {
      const double n = counts_[ch + i], mean = n > 0 ? weighted_[ch + i] / n : 0.0;
      const double d = moments_[at + c + i] - mean;
      m2_[ch + i] = moments_[at + 2 * c + i] + moments_[at + i] * d * d;
      moments_[at + i] = n;
      moments_[at + c + i] = mean;
    }
    at += 3 * c;
    ch += c;
  }
  comm_.sum_host(m2_.data(), m2_.size());
  at = ch = 0;
  for (const Executor::BatchTotal& t : totals_) {
    const std::size_t c = static_cast<std::size_t>(t.channels);
    std::copy_n(m2_.data() + ch, c, moments_.data() + at + 2 * c);
    b.upload(t.data, moments_.data() + at, 3 * c * sizeof(double));
    at += 3 * c;
    ch += c;
  }
  e_.commit_totals();
}

}  // namespace crumb
