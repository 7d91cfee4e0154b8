// What the normalisation family's rows share between the plain ops (engine/ops/norm.cc) and the fused ones
// (engine/ops/norm_fused.cc): BatchNorm's forward, with its training, frozen and evaluation paths and its
// running statistics, run with an epilogue (kernels/norm.h); the CUDA rows' shapes and workspaces. Internal
// to the family.
#pragma once
#include <cstddef>

#include "engine/graph/op.h"
#include "kernels/norm.h"

namespace crumb::ops {

// A batch_norm step's forward (in = x, weight, bias, running_mean, running_var, num_batches_tracked, ...;
// out = y, stats, moments) with the epilogue e, on the CPU; and the commit of its deferred statistics.
template <class T> void batch_norm_forward_cpu(const StepArgs& a, const NormEpilogue<T>& e);
template <class T> void batch_norm_commit_cpu(const StepArgs& a);

}  // namespace crumb::ops

#if CRUMB_HAVE_CUDA
namespace crumb::cuda_rows {

// The same on CUDA, with the kernels' shape of a node (in its layout) and the forward's and backward's
// workspaces.
template <class T> void batch_norm_forward(const StepArgs& a, const NormEpilogue<T>& e);
void batch_norm_commit(const StepArgs& a);
cpu::BatchNormShape batch_norm_shape(const StepArgs& a);
std::size_t batch_norm_forward_workspace(const Graph&, const Node& n, int batch, const OpState*);
std::size_t batch_norm_backward_workspace(const Graph&, const Node& n, int batch, const OpState*);

}  // namespace crumb::cuda_rows
#endif
