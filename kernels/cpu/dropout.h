// The CPU dropout kernel. The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation, write
// modes, float and double) are in docs/architecture.md, Kernels.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dropout_mask.h"

namespace crumb::cpu {

// ---- dropout over n samples of per_sample elements: y (=|+=) x * scale where kept, else 0, with the
// mask of kernels/dropout_mask.h for samples key.first_sample + i of the batch. The forward (x = input,
// write mode) and the backward (x = dy, the parameters' write mode) are the same map. y may alias x.
template <class T>
void dropout(T* y, const T* x, int n, std::size_t per_sample, const RandomKey& key, uint64_t layer,
             uint32_t threshold, T scale, bool accumulate);

}  // namespace crumb::cpu
