// Channels-last plans. cuDNN's 16-bit tensor-core convolutions read and write NHWC; given NCHW tensors
// they transpose them on the way in and out of every convolution. The rewrite here runs the image part of
// a network in NHWC instead, converting once at each region boundary:
// - every node of an op that computes over [C, H, W] (Layouts::Nhwc: convolutions, normalisation,
//   pooling, dropout, and their backward ops) runs in NHWC;
// - a node of a layout-agnostic op (Layouts::Any: ReLU, add, casts) runs in the layout of its first
//   image input, so ReLUs and residual additions stay inside a region;
// - every other node (reshape before a linear layer, the losses) runs in NCHW;
// - a node reading an image value in the other layout reads a conversion of it instead (kToNhwc or
//   kToNchw, engine/ops/layout.h), added just before its first reader and shared by the later ones;
//   values whose two layouts are the same bytes (one channel, or 1x1 positions, as after global
//   average pooling) are read as they are;
// - a convolution in NHWC reads its filter through a conversion to [K, R, S, C] too (cuDNN's tensor-core
//   engines want the filter in the activations' layout), made once per micro-batch from the 16-bit copy
//   the optimizer writes; the filter's gradient is written in the parameter's own NCHW order;
// - an input's gradient, which the caller reads, is converted back to NCHW.
// Parameters, their gradients and the state stay NCHW, so checkpoints are unchanged. Conversions are
// nodes, with values the planner places in the arena like any other, and gradients flow through them
// unchanged (each is the other's gradient). The rewrite runs on the whole graph after build_backward
// and before the memory strategy's rewrites.
#pragma once
#include "engine/graph/graph.h"

namespace crumb {

// Rewrites g as above; returns the conversion nodes it added. g must be NCHW throughout.
int to_channels_last(Graph& g);

}  // namespace crumb
