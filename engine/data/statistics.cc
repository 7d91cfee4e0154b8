#include "engine/data/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/base/error.h"

namespace crumb::data {

Normalization channel_statistics(const Dataset& ds) {
  CRUMB_CHECK(ds.count > 0, "channel statistics of an empty dataset: give at least one sample");
  const std::size_t plane = static_cast<std::size_t>(ds.height) * ds.width;
  const bool u8 = ds.pixel_type() == PixelType::U8;
  const double unit = u8 ? 1.0 / 255.0 : 1.0;
  std::vector<float> mean(ds.channels), std(ds.channels);
  for (int c = 0; c < ds.channels; ++c) {
    // Shifted sums (by the channel's first value) keep the variance exact for large offsets.
    auto value = [&](std::size_t i, std::size_t p) {
      const std::size_t at = (i * ds.channels + c) * plane + p;
      return u8 ? static_cast<const uint8_t*>(ds.samples())[at] * unit
                : static_cast<double>(static_cast<const float*>(ds.samples())[at]);
    };
    const double shift = value(0, 0);
    double sum = 0, sum_sq = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(ds.count); ++i)
      for (std::size_t p = 0; p < plane; ++p) {
        const double d = value(i, p) - shift;
        sum += d;
        sum_sq += d * d;
      }
    const double n = static_cast<double>(ds.count) * plane;
    const double m = sum / n;
    const double var = std::max(0.0, sum_sq / n - m * m);
    CRUMB_CHECK(std::isfinite(m) && std::isfinite(var), "channel ", c, " of the images holds NaN or infinite values");
    mean[c] = static_cast<float>(shift + m);
    std[c] = var > 0 ? static_cast<float>(std::sqrt(var)) : 1.f;
  }
  return {mean, std};
}

}  // namespace crumb::data
