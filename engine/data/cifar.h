// CIFAR-10, binary version: data_batch_1.bin .. data_batch_5.bin (training, read in that order) and
// test_batch.bin (test), each a sequence of 3073-byte records: one label byte (0..9), then a 32x32 image
// as 1024 red, 1024 green and 1024 blue bytes, row-major (NCHW, which is the engine's layout). Any
// number of records per file. Nothing is downloaded: the folder must hold the files.
#pragma once
#include <string>

#include "engine/data/dataset.h"

namespace crumb::data {

inline constexpr int kCifarRecordBytes = 1 + 3 * 32 * 32;

// split is "train" (the five data batches) or "test". Every file must exist, be a regular file, and
// hold whole records with labels below 10; an error names the file and what is wrong.
Dataset load_cifar10_split(const std::string& dir, const std::string& split);

}  // namespace crumb::data
