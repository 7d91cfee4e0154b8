// Runs of 16-bit values converted to and from float32 in SIMD, where the CPU has the instructions: F16C
// for f16, AVX2 integer arithmetic for bf16. The results are kernels/half.h's, bit for bit (rounding to
// nearest even, overflow to infinity, subnormals kept, NaN as half.h writes it), so a machine's results
// do not depend on which path ran; without the instructions (or with simd false) the runs go element by
// element through half.h. The SIMD functions are built for AVX2 and above (the portable package's
// x86-64-v3 and -v4 kernel libraries, or a native build), carry target attributes for F16C and are chosen
// at run time.
#pragma once
#include <cstddef>

#include "kernels/half.h"

namespace crumb::cpu {

// Whether this CPU runs the SIMD conversions (AVX2 and F16C).
bool has_simd16();

// d[i] = s[i] converted, for i < n; with simd false, element by element whatever the CPU.
void to_float_run(float* d, const bf16* s, std::size_t n, bool simd = true);
void to_float_run(float* d, const f16* s, std::size_t n, bool simd = true);
void from_float_run(bf16* d, const float* s, std::size_t n, bool simd = true);
void from_float_run(f16* d, const float* s, std::size_t n, bool simd = true);

}  // namespace crumb::cpu
