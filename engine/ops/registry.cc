// The one list of implementation bindings. Each op family binds its rows next to its declaration
// (engine/ops/<op>.cc for the CPU, engine/ops/<op>_cuda.cc for CUDA); this file only calls them, and
// is the one place that knows which devices this build has.
#include "engine/ops/op.h"

namespace crumb {

// engine/ops/<family>.cc
void bind_linear_cpu(ImplTable& t);
void bind_conv2d_cpu(ImplTable& t);
void bind_pool_cpu(ImplTable& t);
void bind_elementwise_cpu(ImplTable& t);
void bind_softmax_xent_cpu(ImplTable& t);
#if CRUMB_HAVE_CUDA
// engine/ops/<family>_cuda.cc
void bind_linear_cuda(ImplTable& t);
void bind_conv2d_cuda(ImplTable& t);
void bind_pool_cuda(ImplTable& t);
void bind_elementwise_cuda(ImplTable& t);
void bind_softmax_xent_cuda(ImplTable& t);
#endif

const ImplTable& impl_table() {
  static const ImplTable table = [] {
    ImplTable t;
    for (void (*bind)(ImplTable&) : {bind_linear_cpu, bind_conv2d_cpu, bind_pool_cpu, bind_elementwise_cpu,
                                     bind_softmax_xent_cpu})
      bind(t);
#if CRUMB_HAVE_CUDA
    for (void (*bind)(ImplTable&) : {bind_linear_cuda, bind_conv2d_cuda, bind_pool_cuda, bind_elementwise_cuda,
                                     bind_softmax_xent_cuda})
      bind(t);
#endif
    return t;
  }();
  return table;
}

}  // namespace crumb
