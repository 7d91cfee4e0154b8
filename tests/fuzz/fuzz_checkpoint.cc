// libFuzzer target: the checkpoint loader (safetensors header, metadata, tensors, values), into a small
// model with parameters, BatchNorm state (F32 and I64) and SGD momentum, built in float32 and in float64
// (--precision fp64: F64 parameters, state and momentum). Any input either loads or throws crumb::Error
// into each, and a failed load leaves the model as it was.
// With CRUMB_FUZZ_SEED=FILE set, writes a valid checkpoint of the float32 model to FILE (and
// FILE.optimizer) and of the float64 model to FILE64 (and FILE64.optimizer), FILE64 being FILE with "64"
// added, and exits: how corpus/checkpoint/checkpoint.bin, optimizer.bin, checkpoint64.bin and
// optimizer64.bin were made.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/io/checkpoint.h"
#include "engine/base/error.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/softmax_xent.h"
#include "engine/optim/optimizer.h"
#include "tests/fuzz/mem_file.h"

namespace {

struct Model {
  crumb::Graph g;
  std::unique_ptr<crumb::ParamStore> params;
  std::unique_ptr<crumb::Optimizer> opt;
  explicit Model(crumb::DType dtype) {
    using namespace crumb;
    g.set_float_dtype(dtype);
    const ValueId x = g.input("x", {2, 4, 4});
    const ValueId y = g.input("y", {}, DType::I32);
    BatchNormAttrs bn;
    bn.group = 2;
    const ValueId h = nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), "bn", bn);
    nn::softmax_cross_entropy(g, nn::linear(g, nn::flatten(g, h, "flat"), 3, "fc"), y, "loss");
    build_backward(g);
    params = std::make_unique<ParamStore>(g);
    params->init(1);
    OptimizerConfig cfg;
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    opt = make_optimizer(*params, cfg);
  }
};

Model& model(bool f64) {
  static Model m32(crumb::DType::F32), m64(crumb::DType::F64);
  return f64 ? m64 : m32;
}

void load_into(Model& m, const crumb::fuzz::MemFile& file) {
  const std::vector<char> before(static_cast<const char*>(m.params->data_block()),
                                 static_cast<const char*>(m.params->data_block()) + m.params->bytes());
  try {
    crumb::load_checkpoint(file.path(), *m.params, m.opt.get());
  } catch (const crumb::Error&) {
    if (std::memcmp(before.data(), m.params->data_block(), before.size()) != 0) std::abort();  // a failed load wrote
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seed = std::getenv("CRUMB_FUZZ_SEED")) {
    crumb::save_checkpoint(seed, *model(false).params, model(false).opt.get(), "fuzz");
    crumb::save_checkpoint(std::string(seed) + "64", *model(true).params, model(true).opt.get(), "fuzz");
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const crumb::fuzz::MemFile file(data, size);
  load_into(model(false), file);
  load_into(model(true), file);
  return 0;
}
