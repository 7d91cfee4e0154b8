// The op cases (tests/ops/registry.h) as GoogleTest parameters: test names are case names, and a failing
// case prints as its name. And what the 16-bit modes of the op tests share: how close a 16-bit run must
// come, and reading 16-bit values on the host.
#pragma once
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/half.h"
#include "tests/ops/registry.h"

namespace crumb::test {

inline std::string op_case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// The unit roundoff of a 16-bit dtype (half its epsilon): bf16 keeps 8 significant bits, f16 11.
inline double unit_roundoff(DType t) { return t == DType::BF16 ? 0x1p-8 : 0x1p-11; }

// How far an op case's 16-bit run may be from the exact result (its float64 run on the same values):
// kHalfFactor * u, u the dtype's unit roundoff, relative to the magnitude of the values (the largest of
// the tensor compared; tests/gradcheck_test.cc says which tensors share one). Each 16-bit store rounds by
// at most u, and a case chains a few of them and float32 sums of products over them; the worst case
// measures under 4 u. A lost term, a stale or another parameter's 16-bit copy, or BatchNorm statistics
// rounded to 16 bits (9 u on groups of three samples) exceed it.
constexpr double kHalfFactor = 8;
inline double half_tolerance(DType t) { return kHalfFactor * unit_roundoff(t); }

// v rounded to nearest even in the 16-bit dtype t (F32: v), as float.
inline float round_to(DType t, float v) {
  return t == DType::BF16 ? to_float(to_bf16(v)) : t == DType::F16 ? to_float(to_f16(v)) : v;
}

// count values of float dtype t at p (host memory), as doubles.
inline std::vector<double> host_values(const void* p, DType t, std::size_t count) {
  std::vector<double> out(count);
  for (std::size_t i = 0; i < count; ++i) switch (t) {
      case DType::F64: out[i] = static_cast<const double*>(p)[i]; break;
      case DType::BF16: out[i] = to_float(static_cast<const bf16*>(p)[i]); break;
      case DType::F16: out[i] = to_float(static_cast<const f16*>(p)[i]); break;
      default: out[i] = static_cast<const float*>(p)[i]; break;
    }
  return out;
}

}  // namespace crumb::test
