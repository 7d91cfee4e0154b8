// A labelled image dataset: uint8 or float32 samples, one int32 label per sample. The samples are either
// owned (`pixels`: IDX, CIFAR-10, synthetic) or read in place from a memory-mapped file (`mapped`: .npy,
// engine/data/npy.h), so a data set larger than RAM is never copied into it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace crumb {
class MappedFile;
}

namespace crumb::data {

enum class PixelType : uint8_t { U8, F32 };

struct Dataset {
  int count = 0;                 // number of samples
  int channels = 1, height = 0, width = 0;
  int num_classes = 10;
  std::vector<uint8_t> pixels;   // [count, channels, height, width], row-major, unless `mapped` holds them
  std::vector<int32_t> labels;   // [count], each in [0, num_classes)
  // Where the samples come from, for error messages: the file ("DIR/x.npy"; empty: not one file), and the
  // index in it of sample 0 (a test set cut from the end of x.npy starts past the training samples).
  std::string images;
  int64_t first = 0;
  // Samples outside `pixels`: [count, channels, height, width] at data, kept alive (mapped) by owner.
  // When they lie in a file's map, `file` is that map (owner keeps it alive): every read of the samples
  // then goes through file->read (engine/io/mapped_file.h), which survives the file being cut short.
  struct Mapped {
    const void* data = nullptr;
    PixelType type = PixelType::U8;
    std::shared_ptr<const void> owner;
    const MappedFile* file = nullptr;
  } mapped;
  int sample_size() const { return channels * height * width; }
  PixelType pixel_type() const { return mapped.data ? mapped.type : PixelType::U8; }
  const void* samples() const { return mapped.data ? mapped.data : pixels.data(); }
  // Keeps the first n samples (fewer than count): owned pixels shrink, mapped ones stay where they are.
  void keep_first(int n) {
    count = n;
    if (!mapped.data) pixels.resize(static_cast<std::size_t>(n) * sample_size());
    labels.resize(n);
  }
};

// Per-channel normalisation applied when a batch is assembled: x = (v - mean[c]) / std[c], where v is
// pixel / 255 for uint8 samples and the value itself for float32 ones. One value stands for every channel.
struct Normalization {
  Normalization(float m = 0.f, float s = 1.f) : mean{m}, std{s} {}
  Normalization(std::vector<float> m, std::vector<float> s) : mean(std::move(m)), std(std::move(s)) {}
  std::vector<float> mean, std;
};
// Fashion-MNIST training-set statistics (mean and std of pixel/255 over all 60000 images); the
// PyTorch reference in tools/bench uses the same constants.
inline const Normalization kFashionMnistNorm{0.2860f, 0.3530f};
// Synthetic images (make_synthetic) spread their bytes over the whole range: centre them.
inline const Normalization kSyntheticNorm{0.5f, 0.25f};
// CIFAR-10's usual per-channel (R, G, B) training-set statistics.
inline const Normalization kCifar10Norm{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};

// A deterministic dataset for tests: `count` images of size c x h x w whose class is decodable
// from the pixels (so a model can learn it), generated from `seed`. The class prototypes come from `seed`
// alone and the samples from (seed, part): the parts of one seed (a training and a test set) share their
// classes, and each part's samples do not depend on another part's size.
Dataset make_synthetic(int count, int channels, int height, int width, int num_classes, uint64_t seed,
                       uint64_t part = 0);

}  // namespace crumb::data
