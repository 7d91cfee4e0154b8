// Which data a run trains on, by name, and its train/test split: Fashion-MNIST (IDX files), CIFAR-10
// (binary batches), your own arrays (memory-mapped .npy, engine/data/npy.h) or synthetic images of any shape. One place that knows the datasets, shared by the
// Trainer, train's --explain (which plans from the shape alone) and the tests.
#pragma once
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace crumb::data {

struct DataSpec {
  std::string dataset = "fashion-mnist";  // "fashion-mnist" | "cifar10" | "npy" | "synthetic" | "numpy"
  std::string dir;                        // empty: default_data_dir() (Fashion-MNIST)
  int channels = 1, height = 28, width = 28;  // synthetic: the images' shape
  int classes = 10;                           // synthetic
  int limit_train = 0, limit_test = 0;        // 0: every sample (synthetic: 4096 and 1024)
  uint64_t seed = 0;                          // synthetic: the run's seed
};

struct DataSplit {
  Dataset train, test;
  Normalization norm;  // the dataset's own per-channel statistics
  std::string source;  // the folder read, or "synthetic data": for error messages
};

// Reads both splits (an error names the file at fault), cut to the limits; the two must have one image shape.
DataSplit load_data(const DataSpec& spec);

// The paths of every file a run on spec may read in its folder, existing or not: what no output may take
// (none for synthetic data and the Python module's arrays, "numpy").
std::vector<std::string> data_files(const DataSpec& spec);

struct DataShape {
  int channels, height, width, classes;
};
// The image shape and class count a spec gives, without reading the data: IDX images from their
// header where the folder has them (Fashion-MNIST's 28x28 where it has none, so plans need no data).
DataShape data_shape(const DataSpec& spec);

}  // namespace crumb::data
