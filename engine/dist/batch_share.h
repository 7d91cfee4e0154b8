// A rank's share of a batch in data-parallel training: B samples over N ranks in contiguous runs of whole
// groups of G samples (BatchNorm's groups, micro_batch_multiple; G = 1 without BatchNorm), the batch's last
// group short where G does not divide B, the first ranks one group more (torch.tensor_split's rule over the
// groups), so each rank normalises exactly the groups one process forms. G = 1: shares differ by at most
// one sample; G <= 0 (statistics over the whole batch): the whole batch is one group, rank 0's.
#pragma once
#include <algorithm>

#include "engine/base/error.h"

namespace crumb {

struct BatchShare {
  int offset = 0;  // index of the share's first sample in the batch
  int size = 0;    // may be 0 when the batch has fewer samples than there are ranks
};

inline BatchShare batch_share(int batch, int ranks, int rank, int group = 1) {
  CRUMB_CHECK(batch >= 0 && ranks >= 1 && rank >= 0 && rank < ranks, "batch_share: rank ", rank, " of ", ranks,
              " for a batch of ", batch);
  const int g = group >= 1 ? group : std::max(batch, 1);
  const int groups = (batch + g - 1) / g, base = groups / ranks, extra = groups % ranks;
  const int first = rank * base + std::min(rank, extra), last = first + base + (rank < extra ? 1 : 0);
  const int offset = std::min(batch, first * g);
  return {offset, std::min(batch, last * g) - offset};
}

}  // namespace crumb
