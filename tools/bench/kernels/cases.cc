#include "tools/bench/kernels/cases.h"

#include <cmath>
#include <map>
#include <sstream>

#include "engine/device/backend.h"
#include "engine/device/buffer.h"
#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/optim/optimizer.h"
#include "engine/ops/swap.h"
#include "engine/strategy/in_place.h"
#include "engine/train/model_registry.h"
#include "tests/ops/registry.h"

namespace crumb::bench {
namespace {

// The passes Optimizer::step makes over the parameter block, with fixed hyper-parameters (the work does
// not depend on them); SGD with momentum past its first step, as almost every step runs it.
const OptimizerPass kOptimizerPasses[] = {
    {"sgd_momentum_step", 3, 2,
     [](const OptimizerKernels& k, Backend& b, float* const* a, std::size_t n, uint64_t*) {
       k.sgd(b, a[0], a[1], a[2], n, 1e-3f, 0.9f, 5e-4f, false, false, StepExtras{});
     }},
    {"adamw_step", 4, 3,
     [](const OptimizerKernels& k, Backend& b, float* const* a, std::size_t n, uint64_t*) {
       k.adamw(b, a[0], a[1], a[2], a[3], n, adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 1e-2, 10), StepExtras{});
     }},
    {"count_nonfinite", 1, 0,
     [](const OptimizerKernels& k, Backend& b, float* const* a, std::size_t n, uint64_t* out) {
       k.count_nonfinite(b, out, a[0], n);
     }},
};


std::size_t bytes_at(const Value& v, int batch) {
  return static_cast<std::size_t>(v.count(batch)) * dtype_size(v.dtype);
}

// "[8,64,56,56]", with the dtype in front where it is not the float dtype ("U8[8,64,28,28]").
std::string value_str(const Graph& g, ValueId id, int batch) {
  const Value& v = g.value(id);
  std::ostringstream o;
  if (v.dtype != g.float_dtype()) o << dtype_name(v.dtype);
  o << "[";
  if (v.batched) o << batch << (v.dims.empty() ? "" : ",");
  for (std::size_t i = 0; i < v.dims.size(); ++i) o << (i ? "," : "") << v.dims[i];
  o << "]";
  return o.str();
}

// The node's values at the batch, inputs -> outputs, and its window where it has one:
// "[8,64,56,56] [64,64,3,3] -> [8,64,56,56] k3x3 s1x1 p1x1". Two nodes of one op with the same label do
// the same work (the models' other attributes are the same in every layer of a graph).
std::string describe(const Graph& g, const Node& n, int batch) {
  std::string s;
  for (ValueId v : n.in) s += value_str(g, v, batch) + " ";
  s += "->";
  for (ValueId v : n.out) s += " " + value_str(g, v, batch);
  if (const auto* w = std::any_cast<WindowAttrs>(&n.attrs)) {
    std::ostringstream o;
    o << " k" << w->kh << "x" << w->kw << " s" << w->stride_h << "x" << w->stride_w << " p" << w->pad_h << "x"
      << w->pad_w;
    s += o.str();
  }
  return s;
}

Case node_case(const std::string& suite, std::shared_ptr<const Graph> g, NodeId id, int batch) {
  const Node& n = g->node(id);
  Case c;
  c.suite = suite;
  c.op = n.def->name;
  c.layer = n.name;
  c.label = describe(*g, n, batch);
  c.batch = batch;
  c.compute_bound = n.def->flops != nullptr;
  c.flops = c.compute_bound ? n.def->flops(*g, n, batch) : 0;
  for (ValueId v : n.in) c.bytes += bytes_at(g->value(v), batch);
  for (ValueId v : n.out) c.bytes += bytes_at(g->value(v), batch);
  c.graph = std::move(g);
  c.node = id;
  return c;
}

// Adds the nodes of g that keep() selects to out, merging repeats of an op and shape into `layers`. Nodes
// whose op and shape a graph added before this one are skipped: another build of the same model adds
// only what it does differently.
template <class Keep>
void add_graph(const std::string& suite, const std::shared_ptr<const Graph>& g, int batch, Keep keep,
               std::vector<Case>* out, std::map<std::string, int>* index) {
  const std::size_t before = out->size();
  for (NodeId i = 0; i < g->num_nodes(); ++i) {
    const Node& n = g->node(i);
    if (n.def->view || !keep(n)) continue;
    Case c = node_case(suite, g, i, batch);
    const auto [it, fresh] = index->emplace(c.op + " " + c.label, static_cast<int>(out->size()));
    if (fresh) {
      out->push_back(std::move(c));
    } else if (static_cast<std::size_t>(it->second) >= before) {
      ++(*out)[it->second].layers;
    }
  }
}

bool every_node(const Node&) { return true; }

// The suite's training graph; fused as a fused plan trains it (engine/graph/fusion.h), In-Place where it
// can be (engine/strategy/in_place.h), so the fused ops and their recomputations run at the model's shapes.
std::shared_ptr<Graph> build_graph(const Suite& s, const models::NormSpec& norm, bool fused = false) {
  const models::ModelSpec spec(s.channels, s.height, s.width, s.classes, norm);
  auto g = std::make_shared<Graph>(models::build(s.model, spec, s.dtype));
  build_backward(*g);
  if (fused) {
    fuse(*g);
    recompute_in_place(*g);
  }
  return g;
}

// No reference model average-pools, so average pooling runs at the shapes of the model's max pools:
// adds to g an avg_pool2d beside each max_pool2d, on the same input with the same window, and its
// backward where the max pool has one (the pooling's own gradient rule, given a gradient to start from).
void add_avg_pool_stand_ins(Graph& g) {
  const int nodes = g.num_nodes();
  for (NodeId i = 0; i < nodes; ++i) {
    if (g.node(i).def != &kMaxPool2d) continue;
    const Node max = g.node(i);  // a copy: adding nodes may reallocate the node array
    const ValueId y = g.apply(kAvgPool2d, {max.in[0]}, max.name, max.attrs);
    GradBuilder gb(g);
    gb.add_grad(y, gb.new_grad_value(y, "grad(" + max.name + ")"));
    const Node avg = g.node(g.value(y).producer);
    if (gb.needs_grad(avg.in[0])) avg.def->backward(gb, avg);
  }
}

std::vector<Case> model_cases(const Suite& s) {
  std::vector<Case> out;
  std::map<std::string, int> index;
  const std::shared_ptr<Graph> g = build_graph(s, {});
  add_avg_pool_stand_ins(*g);
  add_graph(s.name, g, s.batch, every_node, &out, &index);
  // Models with normalisation train with BatchNorm by default and GroupNorm under --norm gn: the same
  // graph but for the norm layers, which are what the GroupNorm build adds.
  if (models::has_norm(s.model)) {
    models::NormSpec gn;
    gn.kind = models::NormSpec::Kind::Group;
    add_graph(s.name, build_graph(s, gn), s.batch, every_node, &out, &index);
    // And fused, for what fusion runs instead.
    for (const models::NormSpec& norm : {models::NormSpec{}, gn})
      add_graph(s.name, build_graph(s, norm, true), s.batch, every_node, &out, &index);
  }
  int64_t params = 0;
  for (ValueId p : g->params()) params += g->value(p).count(1);
  for (const OptimizerPass& pass : kOptimizerPasses) {
    Case c;
    c.suite = s.name;
    c.op = pass.name;
    c.layer = "parameters";
    c.label = "count " + std::to_string(params);
    c.bytes = static_cast<double>(sizeof(float)) * (pass.arrays + pass.written) * params;
    c.pass = &pass;
    c.count = params;
    out.push_back(std::move(c));
  }
  return out;
}

// DeepBench's training set (github.com/baidu-research/DeepBench, code/kernels/conv_problems.h and
// gemm_problems.h), a few rows each: speech (DeepSpeech's first layers), ImageNet-sized 3x3, 5x5 and
// strided 1x1 convolutions; GEMMs of recurrent and fully connected layers.
struct DeepBenchConv {  // DeepBench's column order: w, h, c, n, k, s (filter w), r (filter h), pads, strides
  int w, h, c, n, k, s, r, pad_w, pad_h, stride_w, stride_h;
};
const DeepBenchConv kDeepBenchConvs[] = {
    {700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2},   {341, 79, 32, 4, 32, 10, 5, 0, 0, 2, 2},
    {54, 54, 64, 8, 64, 3, 3, 1, 1, 1, 1},     {28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1},
    {14, 14, 256, 8, 1024, 1, 1, 0, 0, 2, 2},  {7, 7, 832, 16, 256, 1, 1, 0, 0, 1, 1},
};
struct DeepBenchGemm {  // DeepBench's m, n, k: C [m, n] = A [m, k] B [k, n]
  int m, n, k;
};
const DeepBenchGemm kDeepBenchGemms[] = {
    {1760, 128, 1760}, {2560, 64, 2560}, {4096, 128, 4096}, {3072, 128, 1024}, {35, 8457, 2560}, {1024, 700, 512},
};

// A DeepBench row as a graph: `layer(x)` on an input that needs a gradient (so all three passes run),
// flattened into a loss, after autograd; the cases are the layer's own nodes.
template <class Layer>
void add_deepbench(const std::string& name, Dims x_dims, int batch, Layer layer, std::vector<Case>* out,
                   std::map<std::string, int>* index) {
  auto g = std::make_shared<Graph>();
  const ValueId x = g->input("x", std::move(x_dims), DType::F32, true);
  const ValueId y = nn::flatten(*g, layer(*g, x), "flatten");
  nn::softmax_cross_entropy(*g, y, g->input("labels", {}, DType::I32), "loss");
  build_backward(*g);
  const std::string prefix = name + ".";
  add_graph("deepbench", g, batch,
            [&](const Node& n) { return n.name == name || n.name.compare(0, prefix.size(), prefix) == 0; }, out,
            index);
}

std::vector<Case> deepbench_cases() {
  std::vector<Case> out;
  std::map<std::string, int> index;
  for (const DeepBenchConv& d : kDeepBenchConvs) {
    const std::string name = "conv_" + std::to_string(d.w) + "x" + std::to_string(d.h) + "x" + std::to_string(d.c) +
                             "_k" + std::to_string(d.k) + "_n" + std::to_string(d.n);
    const WindowAttrs window{d.r, d.s, d.stride_h, d.stride_w, d.pad_h, d.pad_w};  // kernel, strides, pads: h, w
    add_deepbench(name, {d.c, d.h, d.w}, d.n, [&](Graph& g, ValueId x) {
      return g.apply(kConv2d, {x, g.param(name + ".weight", {d.k, d.c, d.r, d.s}, ParamInit{})}, name, window);
    }, &out, &index);
  }
  // A GEMM of DeepBench's as a linear layer: the batch is n, in = k and out = m; the two backward passes
  // are the transposed products DeepBench lists separately.
  for (const DeepBenchGemm& d : kDeepBenchGemms) {
    const std::string name = "gemm_" + std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k);
    add_deepbench(name, {d.k}, d.n, [&](Graph& g, ValueId x) { return nn::linear(g, x, d.m, name, false); }, &out,
                  &index);
  }
  return out;
}

// The engine's op test cases (tests/ops: the table the tests run in every mode), timed as well, as ggml's
// test-backend-ops runs its cases in perf mode: each case's own nodes at its batch, without the loss
// around it; swap copies need an executor's copy queue and are left out. Layers are named
// "<case>.<node>".
std::vector<Case> op_test_cases() {
  std::vector<Case> out;
  std::map<std::string, int> index;
  const auto own = [](const Node& n) {
    const std::string name = n.name;
    return name.rfind("loss", 0) != 0 && name.rfind("flat", 0) != 0 && n.def != &kSwapCopy && n.def != &kSwapWait;
  };
  for (const test::OpCase& oc : test::op_cases()) {
    const std::size_t before = out.size();
    add_graph("op_cases", std::make_shared<const Graph>(test::op_graph(oc, DType::F32)), oc.batch, own, &out, &index);
    for (std::size_t i = before; i < out.size(); ++i) out[i].layer = std::string(oc.name) + "." + out[i].layer;
  }
  return out;
}

// Device memory filled from the host: operand values, their magnitudes, or zeros.
enum class Fill { Operands, Magnitudes, Zeros };

Buffer filled(Backend& b, std::size_t bytes, DType dtype, Fill fill) {
  Buffer buf(bytes == 0 ? 1 : bytes, memory_of(b.device()), b.index());
  if (fill == Fill::Zeros || !is_float(dtype)) return buf;  // Buffers start zero-filled
  const std::size_t count = bytes / dtype_size(dtype);
  const auto value = [&](std::size_t i) {
    const float v = operand_value(i);
    return fill == Fill::Magnitudes ? std::fabs(v) : v;
  };
  if (dtype == DType::F32) {
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = value(i);
    b.upload(buf.data(), host.data(), bytes);
  } else if (dtype == DType::BF16) {
    std::vector<bf16> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = to_bf16(value(i));
    b.upload(buf.data(), host.data(), bytes);
  } else {
    std::vector<double> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = value(i);
    b.upload(buf.data(), host.data(), bytes);
  }
  return buf;
}

}  // namespace

const std::vector<Suite>& suites() {
  // Batches: the CLI's default 64 for the Fashion-MNIST models, 128 for the CIFAR-sized ones (the usual
  // CIFAR training batch; the ResNets also at Fashion-MNIST's 1x28x28, the shapes compare.sh trains),
  // and 8 at 224x224 (DeepBench's smallest ImageNet batch) so a full run of the CPU kernels stays
  // within minutes on a small machine.
  static const std::vector<Suite> all = {
      {"lenet5", "lenet5", 1, 28, 28, 10, 64},          {"cnn", "cnn", 1, 28, 28, 10, 64},
      {"mlp", "mlp", 1, 28, 28, 10, 64},
      {"resnet20", "resnet20", 3, 32, 32, 10, 128},     {"resnet20_28", "resnet20", 1, 28, 28, 10, 128},
      {"resnet20_28_bf16", "resnet20", 1, 28, 28, 10, 128, DType::BF16},
      {"resnet18_28", "resnet18", 1, 28, 28, 10, 128},  {"resnet50_224", "resnet50", 3, 224, 224, 1000, 8},
      {"vgg11_bn_32", "vgg11_bn", 3, 32, 32, 10, 128},  {"vgg11_bn_224", "vgg11_bn", 3, 224, 224, 1000, 8},
      {"deepbench", "", 0, 0, 0, 0, 0},  {"op_cases", "", 0, 0, 0, 0, 0},
  };
  return all;
}

std::vector<Case> cases(const Suite& suite) {
  if (suite.name == "op_cases") return op_test_cases();
  return suite.model.empty() ? deepbench_cases() : model_cases(suite);
}

// Whether the engine runs n in place (its in-place output, OpDef::inplace_output, in its first input's
// storage, as the planner puts an in-place op whose input dies there) and a case may too: a ReLU's mask,
// applied to its own result again on every repetition, leaves the same values; the fused BatchNorm + ReLU
// backward's dx, written over dy, is the next repetition's dy (the same work on other values, which stay
// bounded: a repetition scales the last by w invstd, below 1 with these operands, and shifts it). A separate output would be a stream of
// memory more than the training step moves (the fused backward's residual gradient or dx over dy,
// relu_backward's dx).
bool masks_in_place(const Node& n) {
  return n.def == &kReluBwd || n.def == &kBatchNormAddReluBwd || n.def == &kGroupNormAddReluBwd ||
         (n.def == &kBatchNormReluBwd && static_cast<int>(n.out.size()) > n.def->inplace_output);
}

struct EngineCall::Impl {
  Backend& backend;
  std::vector<Buffer> buffers;
  // A node case: its compiled row, the value table its StepArgs points into, the workspace and the key.
  CompiledStep step;
  std::vector<void*> ptr;
  Buffer workspace, key;
  StepArgs args;
  // An optimizer pass: its arrays and count.
  const OptimizerPass* pass = nullptr;
  const OptimizerKernels* kernels = nullptr;
  std::vector<float*> arrays;
  std::size_t count = 0;
  uint64_t* nonfinite = nullptr;

  explicit Impl(Backend& b) : backend(b) {}

  // Compiles node id for the case's batch with its own workspace, pointing into ptr.
  StepArgs compile(const Case& c, NodeId id, CompiledStep* compiled, Buffer* ws) {
    const Node& n = c.graph->node(id);
    *compiled = compile_step(backend, *c.graph, n, c.batch);
    *ws = Buffer(compiled->workspace == 0 ? 1 : compiled->workspace, memory_of(backend.device()), backend.index());
    StepArgs a;
    a.backend = &backend;
    a.graph = c.graph.get();
    a.node = &n;
    a.ptr = ptr.data();
    a.n = c.batch;
    a.loss_scale = 1.0 / c.batch;  // the executor's: the batch is one micro-batch
    a.workspace = ws->data();
    a.workspace_bytes = compiled->workspace;
    a.state = compiled->state.get();
    a.random = n.def->random ? static_cast<const RandomKey*>(static_cast<void*>(key.data())) : nullptr;
    return a;
  }

  // A buffer for value v unless it has one; inputs hold operand values, outputs zeros.
  void give(const Graph& g, ValueId v, int batch, Fill fill) {
    if (ptr[v]) return;
    buffers.push_back(filled(backend, bytes_at(g.value(v), batch), g.value(v).dtype, fill));
    ptr[v] = buffers.back().data();
  }

  void prepare_node(const Case& c) {
    const Graph& g = *c.graph;
    const Node& n = g.node(c.node);
    ptr.assign(g.num_values(), nullptr);
    key = Buffer(sizeof(RandomKey), memory_of(backend.device()), backend.index());
    const RandomKey k{0x5eed, 0};
    backend.upload(key.data(), &k, sizeof k);
    if (masks_in_place(n)) {
      give(g, n.in[0], c.batch, Fill::Operands);
      ptr[n.out[n.def->inplace_output]] = ptr[n.in[0]];
    }
    for (ValueId v : n.out) give(g, v, c.batch, Fill::Zeros);
    for (ValueId v : n.in) give(g, v, c.batch, Fill::Operands);
    // A non-float input another node computes indexes into the other operands (max pooling's argmax):
    // it is what that node leaves, from one run on operands like these.
    for (ValueId v : n.in) {
      const NodeId producer = g.value(v).producer;
      if (is_float(g.value(v).dtype) || producer < 0) continue;
      const Node& p = g.node(producer);
      for (ValueId u : p.in) give(g, u, c.batch, Fill::Operands);
      for (ValueId u : p.out) give(g, u, c.batch, Fill::Zeros);
      CompiledStep compiled;
      Buffer ws;
      const StepArgs a = compile(c, producer, &compiled, &ws);
      compiled.fn(a);
      backend.synchronize();
    }
    args = compile(c, c.node, &step, &workspace);
  }

  // Non-negative operands: AdamW's second moment must be one.
  void prepare_pass(const Case& c) {
    pass = c.pass;
    kernels = &optimizer_kernels(backend.device());
    count = static_cast<std::size_t>(c.count);
    for (int i = 0; i < pass->arrays; ++i) {
      buffers.push_back(filled(backend, count * sizeof(float), DType::F32, Fill::Magnitudes));
      arrays.push_back(reinterpret_cast<float*>(buffers.back().data()));
    }
    buffers.push_back(filled(backend, sizeof(uint64_t), DType::I64, Fill::Zeros));
    nonfinite = reinterpret_cast<uint64_t*>(buffers.back().data());
  }
};

EngineCall::EngineCall(const Case& c, Backend& b) : impl_(std::make_unique<Impl>(b)) {
  b.activate();
  if (c.pass) {
    impl_->prepare_pass(c);
  } else {
    impl_->prepare_node(c);
  }
  b.synchronize();
}

EngineCall::~EngineCall() = default;

void EngineCall::run() {
  Impl& i = *impl_;
  if (i.pass) {
    i.pass->run(*i.kernels, i.backend, i.arrays.data(), i.count, i.nonfinite);
  } else {
    i.step.fn(i.args);
  }
}

std::size_t EngineCall::workspace_bytes() const { return impl_->step.workspace; }

}  // namespace crumb::bench
