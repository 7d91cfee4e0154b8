#include "engine/data/source.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/error.h"
#include "engine/data/cifar.h"
#include "engine/data/idx.h"
#include "engine/data/npy.h"

namespace crumb::data {
namespace {

// Two generated parts of one seed: train and test share the class prototypes, and neither's samples depend
// on the other's count (a different --limit-test leaves the training set as it was).
void split_synthetic(const DataSpec& s, Dataset& train, Dataset& test) {
  const int n_train = s.limit_train ? s.limit_train : 4096, n_test = s.limit_test ? s.limit_test : 1024;
  const uint64_t seed = s.seed + 0x5eed;
  train = make_synthetic(n_train, s.channels, s.height, s.width, s.classes, seed, 1);
  test = make_synthetic(n_test, s.channels, s.height, s.width, s.classes, seed, 2);
}

void truncate(Dataset& ds, int limit) {
  if (limit > 0 && limit < ds.count) ds.keep_first(limit);
}

}  // namespace

DataSplit load_data(const DataSpec& s) {
  const bool cifar = s.dataset == "cifar10", synthetic = s.dataset == "synthetic", npy = s.dataset == "npy";
  DataSplit d;
  d.source = synthetic ? "synthetic data" : s.dir.empty() ? default_data_dir() : s.dir;
  if (synthetic) {
    split_synthetic(s, d.train, d.test);
  } else if (npy) {
    load_npy_dir(d.source, d.train, d.test);
  } else {
    d.train = cifar ? load_cifar10_split(d.source, "train") : load_mnist_split(d.source, "train");
    d.test = cifar ? load_cifar10_split(d.source, "test") : load_mnist_split(d.source, "t10k");
  }
  d.norm = cifar ? kCifar10Norm : synthetic ? kSyntheticNorm : npy ? npy_normalization(d.train) : kFashionMnistNorm;
  truncate(d.train, s.limit_train);
  truncate(d.test, s.limit_test);
  const Dataset &tr = d.train, &te = d.test;
  CRUMB_CHECK(te.channels == tr.channels && te.height == tr.height && te.width == tr.width, d.source,
              ": test images are ", te.channels, "x", te.height, "x", te.width, " but training images are ",
              tr.channels, "x", tr.height, "x", tr.width);
  return d;
}

std::vector<std::string> data_files(const DataSpec& s) {
  if (s.dataset == "synthetic" || s.dataset == "numpy") return {};
  const std::string dir = (s.dir.empty() ? default_data_dir() : s.dir) + "/";
  std::vector<std::string> names;
  if (s.dataset == "cifar10") {
    names = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin",
             "test_batch.bin"};
  } else if (s.dataset == "npy") {
    names = {"x.npy", "y.npy", "x_test.npy", "y_test.npy"};
  } else {
    for (const char* split : {"train", "t10k"})
      for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"})
        for (const char* gz : {"", ".gz"}) names.push_back(std::string(split) + kind + gz);
  }
  for (std::string& n : names) n = dir + n;
  return names;
}

DataShape data_shape(const DataSpec& s) {
  if (s.dataset == "cifar10") return {3, 32, 32, 10};
  if (s.dataset == "synthetic") return {s.channels, s.height, s.width, s.classes};
  if (s.dataset == "npy") {  // mapped: only the headers and the labels are read
    Dataset train, test;
    load_npy_dir(s.dir, train, test);
    return {train.channels, train.height, train.width, train.num_classes};
  }
  const std::string dir = s.dir.empty() ? default_data_dir() : s.dir;
  if (!mnist_split_exists(dir, "train")) return {1, 28, 28, 10};
  const std::vector<int> dims = mnist_image_dims(dir, "train");
  return {1, dims[1], dims[2], 10};
}

}  // namespace crumb::data
