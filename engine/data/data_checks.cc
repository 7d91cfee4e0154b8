#include "engine/data/data_checks.h"

#include <cmath>
#include <vector>

#include "engine/base/error.h"

namespace crumb::data {

void check_labels(const Dataset& ds, const std::string& what) {
  CRUMB_CHECK(ds.num_classes >= 2, what, " has ", ds.num_classes, ds.num_classes == 1 ? " class (every label is 0)" : " classes",
              ": training needs at least 2 classes (a model of one class learns nothing: its loss is 0 whatever it "
              "predicts)");
  for (std::size_t i = 0; i < ds.labels.size(); ++i)
    CRUMB_CHECK(ds.labels[i] >= 0 && ds.labels[i] < ds.num_classes, what, ": label ", ds.labels[i], " at index ", i,
                " is outside [0, ", ds.num_classes, ")");
}

void check_normalization(const Normalization& norm, int channels) {
  const std::size_t n = norm.mean.size();
  CRUMB_CHECK(n == norm.std.size() && (n == 1 || n == static_cast<std::size_t>(channels)), "normalisation: ", n,
              " means and ", norm.std.size(), " stds for images of ", channels,
              " channels (give one mean and one std, or one of each per channel)");
  for (std::size_t c = 0; c < n; ++c) {
    CRUMB_CHECK(std::isfinite(norm.mean[c]), "normalisation: mean[", c, "] is ", norm.mean[c],
                ": give finite means (every image would become NaN)");
    CRUMB_CHECK(std::isfinite(norm.std[c]) && norm.std[c] > 0, "normalisation: std[", c, "] is ", norm.std[c],
                ": give finite stds > 0 (the images are divided by them)");
  }
}

void check_split(const DataSplit& d) {
  check_labels(d.train, "the training data of " + d.source);
  if (d.test.count) check_labels(d.test, "the test data of " + d.source);
  check_normalization(d.norm, d.train.channels);
}

namespace {

template <class T, class Normalise>
std::optional<NonFinite> scan(const Dataset& ds, const T* samples, Normalise normalise) {
  const int64_t sample = ds.sample_size(), plane = int64_t{ds.height} * ds.width;
  for (int i = 0; i < ds.count; ++i) {
    const T* p = samples + i * sample;
    for (int64_t e = 0; e < sample; ++e) {
      const float v = normalise(static_cast<int>(e / plane), p[e]);
      if (!std::isfinite(v)) return NonFinite{i, e, static_cast<float>(p[e]), v};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<NonFinite> find_nonfinite(const Dataset& ds, const Normalization& norm) {
  if (norm.mean.empty() || norm.mean.size() != norm.std.size()) return std::nullopt;
  auto of = [&](const std::vector<float>& v, int c) { return v[v.size() == 1 ? 0 : static_cast<std::size_t>(c)]; };
  if (ds.pixel_type() == PixelType::F32)
    return scan(ds, static_cast<const float*>(ds.samples()),
                [&](int c, float v) { return (v - of(norm.mean, c)) / of(norm.std, c); });
  return scan(ds, static_cast<const uint8_t*>(ds.samples()),
              [&](int c, uint8_t v) { return (float(v) / 255.f - of(norm.mean, c)) / of(norm.std, c); });
}

std::string describe_nonfinite(const Dataset& ds, const NonFinite& bad, const std::string& what) {
  const int64_t plane = int64_t{ds.height} * ds.width;
  const std::string in_file =
      ds.images.empty() ? "" : detail::concat(" (image ", ds.first + bad.sample, " of ", ds.images, ")");
  const std::string value = std::isfinite(bad.value)
                                ? detail::concat(bad.value, ", which the normalisation makes ", bad.normalised)
                                : detail::concat(bad.value);
  return detail::concat(what, ": sample ", bad.sample, in_file, " holds ", value, " at element ", bad.element,
                        " (channel ", bad.element / plane, ", row ", bad.element % plane / ds.width, ", column ",
                        bad.element % ds.width, "): the images must be finite (find them with numpy.isfinite)");
}

}  // namespace crumb::data
