// A small deterministic generator (splitmix64): the same seed gives the same numbers with any
// standard library, which std::uniform_real_distribution does not promise.
#pragma once
#include <cstdint>

#include "kernels/dropout_mask.h"

namespace crumb {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += kGolden64); }
  uint64_t operator()() { return next(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n); the modulo bias is below 2^-32 for n < 2^32.
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

// The key of a training batch for random ops (RandomKey::batch): a function of the run's seed and the
// optimizer step, so a resumed run draws what the uninterrupted one would have.
inline uint64_t random_key(uint64_t seed, uint64_t step) { return mix64(mix64(seed) ^ (step + 1) * kGolden64); }

}  // namespace crumb
