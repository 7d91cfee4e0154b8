// What every client's data must satisfy before a run plans or trains on it, checked in the engine (the
// Trainer) so that train, the Python module and C++ programs refuse the same data the same way: at least
// two classes, every label inside them, a finite normalisation with std > 0. And, once a loss or a
// parameter is no longer finite, whether the data is to blame: a scan for the first sample whose
// normalised value is not finite, so that a NaN pixel is reported as such rather than as divergence.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "engine/data/dataset.h"
#include "engine/data/source.h"

namespace crumb::data {

// Throws crumb::Error naming `what` (e.g. "the training data in DIR") unless ds has 2 or more classes and
// every label in [0, num_classes).
void check_labels(const Dataset& ds, const std::string& what);

// Throws crumb::Error unless norm has one (mean, std) pair or one per channel of images with `channels`
// channels, every mean finite and every std finite and > 0.
void check_normalization(const Normalization& norm, int channels);

// check_labels of both splits and check_normalization of the split's normalisation, each error naming the
// split and its source.
void check_split(const DataSplit& d);

struct NonFinite {
  int sample = 0;         // in the data set (Dataset::first + sample in its images file)
  int64_t element = 0;    // in the sample, [channels, height, width] order
  float value = 0;        // as stored
  float normalised = 0;   // after the normalisation
};
// The first sample of ds (in order) holding a value that is not finite once normalised, if any. Reads
// every sample: for error paths only.
std::optional<NonFinite> find_nonfinite(const Dataset& ds, const Normalization& norm);

// "<what>: sample 17 (image 3 of x.npy) holds nan at element 5 (channel 0, row 0, column 5)..." for an
// error message; what names the split ("the training images of DIR").
std::string describe_nonfinite(const Dataset& ds, const NonFinite& bad, const std::string& what);

}  // namespace crumb::data
