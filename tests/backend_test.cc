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

TEST(Backend, CpuComputesAndStagesInHostMemory) {
  Backend& cpu = backend(Device::CPU);
  EXPECT_EQ(cpu.memory(), Memory::Host);
  EXPECT_EQ(cpu.host_memory(), Memory::Host);
  EXPECT_EQ(memory_of(Device::CPU), Memory::Host);
  EXPECT_FALSE(cpu.copies_overlap());
  EXPECT_FALSE(cpu.can_record());
  EXPECT_EQ(cpu.default_budget(), std::size_t{4} << 30);
  EXPECT_EQ(cpu.float_dtypes(), (std::vector<DType>{DType::F32, DType::F64}));
  EXPECT_FALSE(cpu.has_tf32());
  EXPECT_EQ(cpu.timing_batch(), 4);
  EXPECT_STREQ(cpu.communicator(), "mpi");
  MirroredBuffer block(64, Device::CPU);
  EXPECT_EQ(block.host(), block.device()) << "the CPU computes on the host copy itself";
}

// A run without --device takes a usable GPU, else the CPU.
TEST(Backend, PreferredDeviceIsAUsableGpu) {
  EXPECT_EQ(preferred_device(), device_available(Device::CUDA) ? Device::CUDA : Device::CPU);
}

TEST(Backend, CudaComputesInDeviceMemoryAndStagesFromPinnedMemory) {
  CRUMB_REQUIRE_GPU();
  Backend& gpu = backend(Device::CUDA);
  EXPECT_EQ(gpu.memory(), Memory::Cuda);
  EXPECT_EQ(gpu.host_memory(), Memory::Pinned);
  EXPECT_EQ(memory_of(Device::CUDA), Memory::Cuda);
  EXPECT_TRUE(gpu.copies_overlap());
  EXPECT_TRUE(gpu.can_record());
  const std::size_t free_bytes = gpu.free_bytes();
  EXPECT_LE(gpu.default_budget(), free_bytes);
  EXPECT_GE(gpu.default_budget(), free_bytes / 10 * 9);  // 95% of what is free, give or take other processes
  EXPECT_EQ(gpu.float_dtypes(), std::vector<DType>{DType::F32});
  EXPECT_TRUE(gpu.has_tf32());
  EXPECT_EQ(gpu.timing_batch(), 32);
  EXPECT_STREQ(gpu.communicator(), "nccl");
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
