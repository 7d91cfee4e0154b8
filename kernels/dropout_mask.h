// Dropout's keep mask, shared by the CPU and CUDA kernels so both drop exactly the same elements.
//
// The mask is counter-based: whether element e of sample s is kept is a pure function of (batch key,
// layer stream, s, e), where s is the sample's index in the whole batch. Nothing is carried from one
// micro-batch to the next, so cutting a batch into micro-batches of any size (or running them on
// another device) draws the same mask, and the backward can regenerate it instead of storing it.
// Each sample gets a splitmix64 stream seeded by mixing the batch key, the layer and the sample index;
// element e is that stream's e-th output. Integer arithmetic only: bit-identical on every backend.
#pragma once
#include <cstdint>

#include "kernels/host_device.h"

namespace crumb {

inline constexpr uint64_t kGolden64 = 0x9e3779b97f4a7c15ULL;  // splitmix64's increment

// splitmix64's output function: a bijection of 64-bit words with full avalanche.
CRUMB_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// What a run's random ops draw from, in the device's memory: Executor::run writes it before each
// micro-batch (kernels read it there, so a recorded run replays with the next micro-batch's key).
struct RandomKey {
  uint64_t batch = 0;        // the batch's key: random_key(seed, optimizer step) (engine/graph/rng.h)
  int64_t first_sample = 0;  // index in the batch of the micro-batch's first sample
};

// The state of sample `sample`'s stream in one dropout layer.
CRUMB_HOST_DEVICE uint64_t dropout_sample_state(uint64_t batch_key, uint64_t layer, int64_t sample) {
  return mix64(mix64(batch_key ^ layer) + static_cast<uint64_t>(sample) * kGolden64);
}

// Whether element e of the sample is kept: its 32 high random bits are at least `threshold` (p * 2^32),
// which happens with probability 1 - p to within 2^-32.
CRUMB_HOST_DEVICE bool dropout_keep(uint64_t sample_state, int64_t e, uint32_t threshold) {
  return (mix64(sample_state + (static_cast<uint64_t>(e) + 1) * kGolden64) >> 32) >= threshold;
}

}  // namespace crumb
