// Tests that need a CUDA device skip cleanly without one (a CPU-only build, or no usable GPU).
#pragma once
#include <gtest/gtest.h>

#include "engine/backend.h"

#define CRUMB_REQUIRE_GPU()                                                                             \
  do {                                                                                                  \
    if (!::crumb::device_available(::crumb::Device::CUDA)) GTEST_SKIP() << "no usable CUDA device in this build/machine"; \
  } while (0)
