// A rank's share of a batch in data-parallel training: B samples over N ranks in contiguous runs, the
// first B % N ranks one sample more (torch.tensor_split's rule), so shares differ by at most one sample.
#pragma once
#include <algorithm>

#include "engine/base/error.h"

namespace crumb {

struct BatchShare {
  int offset = 0;  // index of the share's first sample in the batch
  int size = 0;    // may be 0 when the batch has fewer samples than there are ranks
};

inline BatchShare batch_share(int batch, int ranks, int rank) {
  CRUMB_CHECK(batch >= 0 && ranks >= 1 && rank >= 0 && rank < ranks, "batch_share: rank ", rank, " of ", ranks,
              " for a batch of ", batch);
  const int base = batch / ranks, extra = batch % ranks;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace crumb
