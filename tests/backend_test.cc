// What each backend answers where callers used to branch on the device kind: which memory runs allocate
// where, what a budget counts, how the cost model treats copies, whether runs are recorded, which
// communicator ranks connect over. The answers must stay what those branches gave.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/device/backend.h"
#include "engine/device/buffer.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// What the removed branches gave, device by device.
struct Answers {
  Memory memory, host_memory;
  bool copies_overlap, can_record;
  std::vector<DType> float_dtypes;
  bool has_tf32;
  int timing_batch;
  const char* communicator;
};

void expect_answers(Device device, const Answers& want) {
  Backend& b = backend(device);
  EXPECT_EQ(b.memory(), want.memory);
  EXPECT_EQ(memory_of(device), want.memory);
  EXPECT_EQ(b.host_memory(), want.host_memory);
  EXPECT_EQ(b.copies_overlap(), want.copies_overlap);
  EXPECT_EQ(b.can_record(), want.can_record);
  EXPECT_EQ(b.float_dtypes(), want.float_dtypes);
  EXPECT_EQ(b.has_tf32(), want.has_tf32);
  EXPECT_EQ(b.timing_batch(), want.timing_batch);
  EXPECT_STREQ(b.communicator(), want.communicator);
}

TEST(Backend, CpuComputesAndStagesInHostMemory) {
  expect_answers(Device::CPU, {Memory::Host, Memory::Host, false, false, {DType::F32, DType::F64, DType::BF16, DType::F16}, false, 8, "mpi"});
  EXPECT_EQ(backend(Device::CPU).default_budget(), std::size_t{4} << 30);
  MirroredBuffer block(64, Device::CPU);
  EXPECT_EQ(block.host(), block.device()) << "the CPU computes on the host copy itself";
}

// A run without --device takes a usable GPU, else the CPU.
TEST(Backend, PreferredDeviceIsAUsableGpu) {
  EXPECT_EQ(preferred_device(), device_available(Device::CUDA) ? Device::CUDA : Device::CPU);
}

TEST(Backend, CudaComputesInDeviceMemoryAndStagesFromPinnedMemory) {
  CRUMB_REQUIRE_GPU();
  // The GPUs it runs on are sm_80 or newer: they have bf16.
  expect_answers(Device::CUDA, {Memory::Cuda, Memory::Pinned, true, true, {DType::F32, DType::F16, DType::BF16}, true, 32, "nccl"});
  Backend& gpu = backend(Device::CUDA);
  const std::size_t free_bytes = gpu.free_bytes();
  EXPECT_LE(gpu.default_budget(), free_bytes);
  EXPECT_GE(gpu.default_budget(), free_bytes / 10 * 9);  // 95% of what is free, give or take other processes
  // Buffers find the backend of their memory kind.
  EXPECT_EQ(&backend_serving(Memory::Pinned, 0), &gpu);
  EXPECT_EQ(&backend_serving(Memory::Cuda, 0), &gpu);
}

// A mirrored block on the GPU has a copy in device memory, and the transfers carry the bytes both ways.
TEST(Backend, CudaMirroredBufferHasADeviceCopy) {
  CRUMB_REQUIRE_GPU();
  MirroredBuffer block(64, Device::CUDA);
  EXPECT_NE(block.host(), block.device());
  std::memset(block.host(), 7, 64);
  block.to_device();
  std::memset(block.host(), 0, 64);
  block.to_host();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(block.host()[i], 7) << i;
}

}  // namespace
}  // namespace crumb
