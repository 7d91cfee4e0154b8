// Element types, devices, layouts and dims: what every layer and the kernels describe a tensor with.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace crumb {

// BF16 and F16 are storage types (engine/base/half.h): kernels load them, compute in float32 and store
// them rounded to nearest even. The names are safetensors'.
enum class DType : uint8_t { F32, F64, I32, U8, I64, BF16, F16 };
enum class Device : uint8_t { CPU, CUDA };
// The memory order of an image tensor's per-sample [C, H, W] (a filter's [K, C, R, S]): channels outermost
// (PyTorch's default), or innermost (channels_last, what cuDNN's 16-bit tensor-core kernels read).
// Dims stay [C, H, W] either way; the layout says how they are laid out (docs/precision.md).
enum class Layout : uint8_t { NCHW, NHWC };
inline const char* layout_name(Layout l) { return l == Layout::NCHW ? "NCHW" : "NHWC"; }

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BF16: case DType::F16: return 2;
    default: return 4;
  }
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    default: return "U8";
  }
}
inline bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || is_half(t); }
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }
// The device device_name() calls `name`; false for any other name.
inline bool device_named(const std::string& name, Device& out) {
  for (Device d : {Device::CPU, Device::CUDA})
    if (name == device_name(d)) {
      out = d;
      return true;
    }
  return false;
}

using Dims = std::vector<int64_t>;

inline int64_t dims_count(const Dims& d) {
  int64_t c = 1;
  for (int64_t x : d) c *= x;
  return c;
}
std::string dims_str(const Dims& d);  // "[2, 3, 4]"

}  // namespace crumb
