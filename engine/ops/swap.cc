// The ops a swap schedule adds (engine/strategy/swap.h): swap_copy starts an asynchronous copy of its input into its
// output (arena to host pool, or back) under a ticket of the executor's CopyQueue; swap_wait reads the value
// a copy is moving, so the planner keeps it live until then, and holds later work until that copy is done.
// The copy itself is the device's (engine/device/copy_queue.h), so every device binds the same rows.
#include "engine/ops/swap.h"

#include "engine/device/copy_queue.h"
#include "engine/base/error.h"
#include "engine/base/registry.h"

namespace crumb {
namespace {

void infer_copy(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  ops::attrs<SwapAttrs>(n);
  const Value &x = g.value(n.in[0]), &y = g.value(n.out[0]);
  if (x.dtype != y.dtype || x.batched != y.batched) ops::fail(n, "copies between values of one dtype and batching");
  ops::set_out_dims(g, n, 0, x.dims);
}

void infer_wait(Graph&, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(0));
  ops::attrs<SwapAttrs>(n);
}

CopyQueue& queue(const StepArgs& a) {
  if (!a.copies) ops::fail(*a.node, "the executor has no copy queue");
  return *a.copies;
}

void copy_run(const StepArgs& a) {
  const std::size_t bytes = static_cast<std::size_t>(a.in_value(0).count(a.n)) * dtype_size(a.in_value(0).dtype);
  queue(a).start(ops::attrs<SwapAttrs>(*a.node).ticket, a.out<char>(0), a.in<char>(0), bytes);
}

void wait_run(const StepArgs& a) { queue(a).wait(ops::attrs<SwapAttrs>(*a.node).ticket); }

}  // namespace

const OpDef kSwapCopy = OpDef("swap_copy", infer_copy).with_layouts(Layouts::Any);
// swap_wait has no outputs: it holds later work until its copy is done.
const OpDef kSwapWait = OpDef("swap_wait", infer_wait).with_outputs({}).with_layouts(Layouts::Any);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  for (Device d : {Device::CPU, Device::CUDA})
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {  // byte copies: any dtype
      t.add(kSwapCopy, d, dt, OpImpl(copy_run));
      t.add(kSwapWait, d, dt, OpImpl(wait_run));
    }
}

}  // namespace crumb
