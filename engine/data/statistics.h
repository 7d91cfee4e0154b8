// A dataset's own per-channel statistics: what images brought from outside (numpy arrays in the Python
// module) are normalised with, as the built-in data sets are with theirs (dataset.h).
#pragma once
#include "engine/data/dataset.h"

namespace crumb::data {

// The mean and standard deviation over every sample and pixel, per channel, of pixel / 255 for uint8
// samples and of the value itself for float32 ones (accumulated in double). A channel whose values are
// all equal gets std 1, so normalising never divides by zero. An error for an empty dataset.
Normalization channel_statistics(const Dataset& ds);

}  // namespace crumb::data
