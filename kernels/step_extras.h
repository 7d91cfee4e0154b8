// What an optimizer kernel does besides its update, in the same pass over the parameter block: mixed
// precision's unscaling of the gradient (1 / the fp16 loss scale), the write of the parameters'
// 16-bit copies, which the 16-bit ops read (engine/run/params.h), and the count of non-finite parameters.
#pragma once
#include <cstdint>
#include <type_traits>

#include "engine/base/tensor.h"
#include "kernels/half.h"

namespace crumb {

struct StepExtras {
  float grad_scale = 1.0f;  // the gradient is read as grad * grad_scale (exact for a power of two)
  void* copy = nullptr;     // null: no copies; else copy[i] = the updated parameter i as copy_dtype
  DType copy_dtype = DType::BF16;
  // Non-null, for a kernel that counts in its pass (OptimizerKernels::counts_nonfinite): *nonfinite (the
  // device's memory) = the updated parameters that are NaN or infinite, counted while they are in cache.
  uint64_t* nonfinite = nullptr;
};

// Calls f(T{}) with T the copies' element type (float standing for "no copies"), so that a kernel's loop
// is compiled once per kind of copy instead of branching per element.
template <class F> void with_copy_type(const StepExtras& x, F&& f) {
  if (!x.copy) return f(float{});
  if (x.copy_dtype == DType::F16) return f(f16{});
  return f(bf16{});
}

// Stores the updated parameter p into its copy, if the kernel writes copies (T is not float).
template <class T> CRUMB_HOST_DEVICE void store_copy(void* copy, std::size_t i, float p) {
  if constexpr (!std::is_same_v<T, float>) static_cast<T*>(copy)[i] = from_float<T>(p);
}

}  // namespace crumb
