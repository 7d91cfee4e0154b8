// Reader for the IDX format (MNIST / Fashion-MNIST), plain or gzip-compressed (detected by magic).
// Every defect (missing file, bad gzip stream, wrong magic, wrong dtype, truncated payload, trailing
// bytes, label out of range, image/label count mismatch) throws crumb::Error naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace crumb::data {

struct IdxArray {
  std::vector<int> dims;       // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> bytes;  // payload, row-major (only unsigned-byte IDX, type code 0x08)
};

// Reads a whole file, inflating it if it starts with the gzip magic.
IdxArray read_idx(const std::string& path);
// Reads and checks only the header: the dims, without the payload.
std::vector<int> read_idx_dims(const std::string& path);

// Loads `<dir>/<split>-images-idx3-ubyte.gz` and `<dir>/<split>-labels-idx1-ubyte.gz` (also accepts the
// uncompressed names without .gz). split is "train" or "t10k". Checks counts match, labels < 10.
Dataset load_mnist_split(const std::string& dir, const std::string& split);

// The dims {count, height, width} of a split's images from their file's header alone (what --explain
// plans for), and whether the folder holds that split's image file at all.
std::vector<int> mnist_image_dims(const std::string& dir, const std::string& split);
bool mnist_split_exists(const std::string& dir, const std::string& split);

// Where Fashion-MNIST is read from when no folder is named: $CRUMB_DATA if set and non-empty (machines
// where the data was copied elsewhere, such as the GPU machine), else Debian's dataset-fashion-mnist.
std::string default_data_dir();

}  // namespace crumb::data
