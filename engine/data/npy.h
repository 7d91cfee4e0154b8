// Your own data as NumPy .npy files (format versions 1-3), memory-mapped: images are read in place while
// batches are assembled, so a data set larger than RAM trains too.
//
// A folder DIR holds x.npy, the images (uint8 or float32, shape N x C x H x W, C order, little-endian),
// and y.npy, their labels (any integer dtype, shape N, each in [0, classes) where classes is the largest
// training label + 1). The test set is x_test.npy + y_test.npy when both are there, else the last tenth of
// x.npy (at least one sample), which then does not train. uint8 images are normalised like the image data
// sets, float32 ones are taken as they are (npy_normalization). Labels are converted to int32 in
// memory (4 bytes a sample).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace crumb::data {

// uint8 .npy images: pixel / 255 mapped onto [-1, 1]. float32 ones: unchanged.
inline const Normalization kNpyU8Norm{0.5f, 0.5f};
inline const Normalization kNpyF32Norm{0.f, 1.f};
inline const Normalization& npy_normalization(const Dataset& ds) {
  return ds.pixel_type() == PixelType::F32 ? kNpyF32Norm : kNpyU8Norm;
}

// One .npy array: its dtype and shape, where its elements start in the file, and, where the file is in
// memory, the elements themselves.
struct NpyArray {
  char kind = 0;     // the dtype's kind: 'u' unsigned, 'i' signed integer, 'f' float, ...
  int itemsize = 0;  // bytes per element
  std::vector<int64_t> shape;
  uint64_t offset = 0;            // where the elements start: the magic, version and header come before
  const uint8_t* data = nullptr;  // the elements, C order, little-endian (parse_npy only)
  std::string dtype() const;      // "uint8", "float32", "int64", ...
};

// The most header a .npy file may have (numpy writes well under a KiB for any shape read here).
constexpr std::size_t kMaxNpyHeaderBytes = std::size_t{1} << 20;

// Parses the header of a .npy file of file_size bytes, whose first bytes are [bytes, bytes + size) (the
// whole header, or the first kMaxNpyHeaderBytes + 12 bytes). path names it in errors. Throws crumb::Error
// for a bad magic or header, a header over kMaxNpyHeaderBytes, a big-endian or Fortran-order array, or
// a file size other than the shape's exactly.
NpyArray parse_npy_header(const uint8_t* bytes, std::size_t size, uint64_t file_size, const std::string& path);
// The same for a whole .npy file held in [bytes, bytes + size), with data pointing to its elements.
NpyArray parse_npy(const uint8_t* bytes, std::size_t size, const std::string& path);

// Images x_path and labels y_path as a data set mapped from x_path (classes 0: the largest label + 1). Both
// are opened as every input is (engine/io/input_file.h: regular files only, never blocking); the labels
// are read into memory, the images read in place through a MappedFile (engine/io/mapped_file.h), which
// turns a file truncated or rewritten during the run into one error naming it.
Dataset load_npy(const std::string& x_path, const std::string& y_path, int classes = 0);

// DIR's training and test sets (the file header's rules above).
void load_npy_dir(const std::string& dir, Dataset& train, Dataset& test);

}  // namespace crumb::data
