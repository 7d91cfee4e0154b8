// Element types, devices and a non-owning tensor view. Activations are never owned by a Tensor:
// they live in the arena and the executor hands out views into it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace crumb {

enum class DType : uint8_t { F32, F64, I32, U8, I64 };
enum class Device : uint8_t { CPU, CUDA };

inline std::size_t dtype_size(DType t) { return t == DType::F64 || t == DType::I64 ? 8 : t == DType::U8 ? 1 : 4; }
inline const char* dtype_name(DType t) {
  return t == DType::F32 ? "F32" : t == DType::F64 ? "F64" : t == DType::I32 ? "I32" : t == DType::I64 ? "I64" : "U8";
}
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

// A view over memory the caller owns. Contiguous row-major unless strides say otherwise.
struct Tensor {
  void* data = nullptr;
  Dims dims;
  Dims strides;  // in elements; empty means contiguous row-major
  DType dtype = DType::F32;
  Device device = Device::CPU;

  int64_t count() const { return dims_count(dims); }
  std::size_t bytes() const { return static_cast<std::size_t>(count()) * dtype_size(dtype); }
  template <class T> T* as() const { return static_cast<T*>(data); }
};

}  // namespace crumb
