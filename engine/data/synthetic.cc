// Synthetic data: each class owns a random prototype image; a sample is its class prototype plus
// bounded noise. Integer-only arithmetic on a private splitmix64 stream makes the bytes identical on
// every platform and standard library (std:: distributions are implementation-defined).
#include <algorithm>

#include "engine/data/dataset.h"
#include "engine/base/error.h"
#include "engine/graph/rng.h"

namespace crumb::data {
namespace {

// Noise amplitude: a sample stays much closer to its own prototype than to any other, yet pixels
// vary enough that a model has to look at more than one of them.
constexpr int kNoiseHalfWidth = 24;

}  // namespace

Dataset make_synthetic(int count, int channels, int height, int width, int num_classes, uint64_t seed,
                       uint64_t part) {
  CRUMB_CHECK(count >= 0, "make_synthetic: count must be >= 0, got ", count);
  CRUMB_CHECK(channels > 0 && height > 0 && width > 0, "make_synthetic: image shape ", channels,
              "x", height, "x", width, " must be positive");
  CRUMB_CHECK(num_classes > 0, "make_synthetic: num_classes must be > 0, got ", num_classes);
  const uint64_t sample = uint64_t(channels) * height * width;
  CRUMB_CHECK(sample * std::max(count, num_classes) <= (uint64_t{1} << 31),
              "make_synthetic: ", count, " samples of ", channels, "x", height, "x", width,
              " exceed the 2 GiB limit");

  Dataset ds;
  ds.count = count;
  ds.channels = channels;
  ds.height = height;
  ds.width = width;
  ds.num_classes = num_classes;
  Rng rng(seed);

  // Prototypes are constant over square blocks (about 7 per side) so they survive pooling and
  // stay learnable for convolutional models, not only for per-pixel linear ones.
  const int block = std::max(1, std::min(height, width) / 7);
  const int bh = (height + block - 1) / block, bw = (width + block - 1) / block;
  std::vector<uint8_t> proto(size_t(num_classes) * sample);
  std::vector<uint8_t> level(size_t(bh) * bw);
  for (int k = 0; k < num_classes; ++k)
    for (int c = 0; c < channels; ++c) {
      for (auto& v : level) v = static_cast<uint8_t>(rng.below(256));
      uint8_t* dst = &proto[(size_t(k) * channels + c) * height * width];
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) dst[y * width + x] = level[(y / block) * bw + x / block];
    }

  // Exactly balanced classes (counts differ by at most one), in shuffled order. Part 0 goes on drawing
  // from the prototypes' stream (what every part drew before parts existed).
  if (part) rng = Rng(seed ^ (0x9e3779b97f4a7c15ULL * part));
  ds.labels.resize(count);
  for (int i = 0; i < count; ++i) ds.labels[i] = i % num_classes;
  for (int i = count - 1; i > 0; --i) std::swap(ds.labels[i], ds.labels[rng.below(i + 1)]);

  ds.pixels.resize(size_t(count) * sample);
  for (int i = 0; i < count; ++i) {
    const uint8_t* p = &proto[size_t(ds.labels[i]) * sample];
    uint8_t* dst = &ds.pixels[size_t(i) * sample];
    for (uint64_t j = 0; j < sample; ++j) {
      // Sum of two uniforms: triangular noise in [-2h, 2h], concentrated near zero.
      const int noise = int(rng.below(2 * kNoiseHalfWidth + 1)) +
                        int(rng.below(2 * kNoiseHalfWidth + 1)) - 2 * kNoiseHalfWidth;
      dst[j] = static_cast<uint8_t>(std::clamp(p[j] + noise, 0, 255));
    }
  }
  return ds;
}

}  // namespace crumb::data
