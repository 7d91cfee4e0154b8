#include "tools/train/flags.h"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "engine/base/error.h"
#include "engine/strategy/memory_report.h"
#include "engine/train/network.h"
#include "engine/train/network_file.h"

namespace crumb::train {
namespace {

// Plain decimal digits with an optional '-': strtoll alone would also take " 2", "+2" and "2 ".
bool plain_integer(const std::string& s) {
  const std::size_t start = !s.empty() && s[0] == '-' ? 1 : 0;
  return s.size() > start && s.find_first_not_of("0123456789", start) == std::string::npos;
}

long long parse_int(const std::string& flag, const std::string& s, long long lo, long long hi) {
  CRUMB_CHECK(plain_integer(s), "--", flag, ": '", s, "' is not an integer");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  CRUMB_CHECK(!s.empty() && end && *end == '\0' && errno == 0, "--", flag, ": '", s, "' is not an integer");
  CRUMB_CHECK(v >= lo && v <= hi, "--", flag, ": ", v, " is out of range [", lo, ", ", hi, "]");
  return v;
}

double parse_float(const std::string& flag, const std::string& s, double lo, double hi) {
  // Decimal notation only ("0.05", "-1", "1e-4"): no sign '+', spaces, hex floats, inf or nan.
  CRUMB_CHECK(!s.empty() && s.find_first_not_of("0123456789.eE-+") == std::string::npos && s[0] != '+' &&
                  s[0] != 'e' && s[0] != 'E',
              "--", flag, ": '", s, "' is not a number");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  CRUMB_CHECK(!s.empty() && end && *end == '\0' && errno == 0 && std::isfinite(v), "--", flag, ": '", s,
              "' is not a number");
  CRUMB_CHECK(v >= lo && v <= hi, "--", flag, ": ", v, " is out of range [", lo, ", ", hi, "]");
  return v;
}

// Flags that only one optimizer or schedule reads: given to the other, they are mistakes.
void check_applies(const std::set<std::string>& given, std::initializer_list<const char*> flags, bool applies,
                   const std::string& needs) {
  for (const char* f : flags) CRUMB_CHECK(applies || !given.count(f), "--", f, " needs ", needs);
}

std::size_t parse_size(const std::string& flag, const std::string& s) {
  try {
    return parse_bytes(s);
  } catch (const Error& e) {
    CRUMB_FAIL("--", flag, ": ", e.what());
  }
}

}  // namespace

const char* usage() {
  return R"(usage: train [flags]
Trains a model on Fashion-MNIST with Crumb's graph executor and reports test accuracy per epoch.

  --model NAME         mlp | lenet5 | cnn | resnet20 | resnet18 | resnet50 | vgg11_bn
                       (vgg11_bn: images of at least 32x32, e.g. --dataset cifar10)  (default lenet5)
  --model-file FILE    your own network instead of --model: a JSON description of its layers
                       (docs/networks.md; the Python module writes it); recorded in checkpoints, so
                       --resume needs no file
  --network JSON       the same description given inline
  --norm N             resnets, vgg11_bn: bn (BatchNorm) | gn (GroupNorm, 32 groups or fewer; independent of
                       the batch, so micro-batching is exact with no conditions)  (default bn)
  --bn-group G         BatchNorm normalises over groups of G samples; micro-batches hold whole groups,
                       so results do not depend on the micro-batch size or the budget. "batch": over
                       the whole batch (PyTorch's semantics), which must then run as one micro-batch
                                                                            (default 32)
  --bn-stats S         deferred: one running-statistics update per optimizer step from the exact
                       whole-batch mean and variance | per-group: one update per group, as PyTorch
                       does per forward under gradient accumulation         (default deferred)
  --dropout P          vgg11_bn: the classifier's dropout probability, in [0, 1); each sample's mask
                       depends on (seed, step, its index in the batch), not on the micro-batch
                                                                            (default 0.5)
  --epochs N           passes over the training set; 0 evaluates the --load checkpoint  (default 1)
  --batch B            samples per optimizer step              (default 64)
  --micro-batch M      samples per forward/backward (M <= B); gradients of the micro-batches are
                       accumulated, so the step equals a full-batch step
                       (default: the largest that fits --memory-budget, B when the batch fits)
  --optimizer NAME     sgd | adamw (torch.optim.SGD / torch.optim.AdamW semantics)  (default sgd)
  --lr X               learning rate                  (default 0.05 for sgd, 0.001 for adamw)
  --weight-decay X     sgd: L2 term added to the gradient; adamw: decoupled, p *= 1 - lr * X
                                                      (default 0 for sgd, 0.01 for adamw)
  --momentum X         sgd: momentum in [0, 1)                 (default 0.9)
  --nesterov           sgd: Nesterov momentum (needs --momentum > 0)
  --beta1 X            adamw: first-moment decay in [0, 1)     (default 0.9)
  --beta2 X            adamw: second-moment decay in [0, 1)    (default 0.999)
  --eps X              adamw: term added to the denominator, > 0 (default 1e-8)
  --lr-schedule S      constant | step | cosine, evaluated once per optimizer step (default constant):
                       step multiplies the lr by --lr-gamma every --lr-step-size optimizer steps
                       (PyTorch StepLR counted in steps); cosine anneals it to 0 over the run's
                       optimizer steps (CosineAnnealingLR, T_max = all steps, resumed ones included)
  --lr-step-size N     step: optimizer steps between decays    (default 1000)
  --lr-gamma X         step: factor per decay in (0, 1]        (default 0.1)
  --warmup-steps N     linear warmup: step k < N runs at lr * (k + 1) / N, times the schedule
                       (PyTorch LinearLR, start_factor 1/N, total_iters N - 1)  (default 0: none)
  --device D           cpu | cuda                              (default cuda when a GPU is usable, else cpu)
  --threads N          CPU threads for all kernels             (default 2)
  --seed N             seed for initialisation and shuffling   (default 0)
  --dataset NAME       fashion-mnist | cifar10 (the binary version: data_batch_1..5.bin,
                       test_batch.bin in --data, which it needs) | synthetic (learnable generated
                       images, 4096 train + 1024 test unless --limit-*) | npy (your own data,
                       memory-mapped from --data DIR: x.npy, images N x C x H x W of uint8 (x/255
                       mapped to [-1, 1]) or float32 (taken as is), C order, and y.npy, integer
                       labels 0..K-1; tested on x_test.npy + y_test.npy if there, else on the last
                       tenth of x.npy, which then does not train) (default fashion-mnist)
  --augment MODE       none | crop-flip (random crop with 4-pixel zero padding, horizontal flip,
                       on the training set, seeded)              (default none)
  --input CxHxW        synthetic: image shape, e.g. 3x224x224  (default 1x28x28)
  --classes K          synthetic: number of classes            (default 10)
  --data DIR           folder with the dataset's files         (Fashion-MNIST: default $CRUMB_DATA, else
                                                               /usr/share/datasets/fashion-mnist)
  --limit-train N      use only the first N training samples   (default all)
  --limit-test N       use only the first N test samples       (default all)
  --memory-budget SIZE memory for persistent state + arena + workspace + input staging, e.g. 64MiB,
                       1.5GiB; the largest micro-batch that fits is used
                       (default: 4GiB on the CPU, 95% of the free GPU memory on CUDA)
  --strategy S         how to fit the budget: auto | micro-batch | swap | recompute | none
                       (default auto: the largest micro-batch that fits in memory; where even the
                       smallest allowed one, or --micro-batch, does not fit, saved activations are
                       swapped to host memory or recomputed in the backward pass, each where the cost
                       model, fed by kernel times and copy bandwidth measured here, predicts it is
                       cheaper. swap / recompute: only that technique, at the largest micro-batch it
                       fits. none: the whole batch in memory. Results are the same bits either way)
  --save FILE          write the model's state_dict to FILE (safetensors, PyTorch's names: torchvision
                       loads it strictly) and the optimizer state to FILE.optimizer, at every epoch
                       end, on SIGINT/SIGTERM (after the step in progress) and after training; each
                       write replaces the previous one atomically. The folder is checked first.
  --save-every N       also write --save every N optimizer steps
  --resume FILE        continue the run saved in FILE (and FILE.optimizer) exactly where it stopped:
                       epoch and batch, data order, optimizer state, schedule, BatchNorm state and
                       every setting it recorded; --epochs N means N epochs in total. Bit-identical to
                       an uninterrupted run on the CPU with the same --threads and micro-batch size
  --fresh-optimizer    with --resume: continue without FILE.optimizer (missing or from another save),
                       starting the optimizer afresh (zero momentum, the schedule from its first step);
                       without it a resume refuses to lose the optimizer's state
  --load FILE          start from the weights + optimizer state in FILE (shapes must match the model)
  --log FILE           write a JSON line per optimizer step (loss, lr, samples/s, micro-batch, arena,
                       max RSS) and per epoch (train/test loss, test accuracy) to FILE, flushed as
                       the run goes (JSON Lines: one object per line, for plots and tail -f); a
                       resumed run appends to it; a write that fails warns once and the run goes
                       on without the log
  --precision P        fp32 | tf32 | bf16 | fp16 (default fp32). tf32: CUDA matrix products and
                       convolutions round float32 operands to TF32 on tensor cores (faster, ~1e-3
                       relative error per product; PyTorch's default for convolutions); the CPU
                       computes float32. bf16, fp16: mixed precision as torch.autocast: activations
                       and their gradients are 16-bit (half the arena), convolutions and linear layers
                       read 16-bit weight copies, and weights, their gradients (accumulated over
                       micro-batches in float32), optimizer state, BatchNorm statistics and the loss
                       stay float32; checkpoints hold the float32 weights. fp16 scales the loss
                       dynamically (docs/precision.md); bf16 needs a GPU of compute capability >= 8.0
  --tf32               the same as --precision tf32
  --loss-scale S       fp16: the initial loss scale, a power of two          (default 65536)
  --loss-scale-growth-interval N
                       fp16: clean steps in a row before the scale doubles   (default 2000)
  --channels-last on|off|auto
                       run convolutions, normalisation and pooling in NHWC (channels_last), with
                       conversions where the network leaves them (default auto: on for bf16 and fp16
                       on CUDA, where cuDNN's tensor-core kernels want NHWC; off otherwise). The
                       result is the same up to float32 summation order; checkpoints stay NCHW
  --cuda-graphs on|off record each micro-batch's work once and replay it as one CUDA graph (default on)
  --fuse on|off        fuse chains of ops into one op each after autograd: BatchNorm or GroupNorm (+ the
                       residual add) + ReLU, forward and backward; --explain names the fused steps
                       (default on). The result is the same up to float32 rounding order
  --deterministic      CUDA: only convolution algorithms that give the same bits on every run, as
                       torch.backends.cudnn.deterministic (some of cuDNN's fastest backward ones add
                       with atomics); the CPU is deterministic without it
  --explain            print the memory plan (breakdown, chosen micro-batch, live bytes per step)
                       and exit without training
  --explain-csv FILE   with --explain: also write the per-step timeline as CSV
  --report FILE.html   write the memory report: arena map (every tensor's address over its
                       lifetime), memory timeline, batch sweep (memory against the micro-batch size)
                       and their tables, in one self-contained HTML file; with --explain from the plan
                       alone, after training with the measured figures too
  --report-dir DIR     the same pictures as SVG files and the tables as CSV, in DIR (created)
  --sweep M1,M2,...    before training, time a few optimizer steps at each micro-batch size and
                       measure the peak RSS; the report plots them (sizes <= --batch, whole
                       BatchNorm groups)
  --bucket-cap SIZE    under mpirun: gradient bytes per all-reduce bucket (PyTorch DDP's bucket_cap_mb;
                       the first bucket, the last layers, closes at 1MiB)   (default 25MiB)
  --dist-timeout S     under mpirun: seconds a rank waits for the others in a collective before it
                       stops every rank with an error               (default 300)
  --help               this text

Data-parallel training: mpirun -np N train ... splits every batch over N processes (docs/distributed.md).

No output (--save, --log, --report, --report-dir, --explain-csv) may be an input (--load, --resume, the
data files) or another output, by any name or link (--save may replace the --resume checkpoint); outputs
are regular files, never written through a symbolic link.

Flags are "--name value" or "--name=value", each at most once, never with an empty value; integers are
plain decimal digits. Progress goes to stderr (a bar on a terminal, plain lines otherwise); the last
stdout line is a JSON summary (a failed write to stdout is an error).
)";
}

Options parse_flags(int argc, char** argv) { return parse_flags(std::vector<std::string>(argv + 1, argv + argc)); }

Options parse_flags(const std::vector<std::string>& argv) {
  Options o;
  OptimizerConfig& opt = o.optimizer;
  std::set<std::string> given;
  const int argc = static_cast<int>(argv.size());
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    CRUMB_CHECK(arg.rfind("--", 0) == 0, "unexpected argument '", arg, "' (flags start with --; see --help)");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    CRUMB_CHECK(given.insert(name).second, "--", name, " is given twice");
    if (name == "help" || name == "explain" || name == "tf32" || name == "nesterov" || name == "fresh-optimizer" ||
        name == "deterministic") {
      CRUMB_CHECK(eq == std::string::npos, "--", name, " takes no value");
      o.args.push_back("--" + name);
      if (name == "tf32") o.precision = Precision::TF32;
      else (name == "help" ? o.help : name == "explain" ? o.explain : name == "nesterov" ? opt.nesterov
            : name == "deterministic" ? o.deterministic : o.fresh_optimizer) = true;
      continue;
    }
    if (eq == std::string::npos) {
      CRUMB_CHECK(i + 1 < argc, "--", name, " needs a value (see --help)");
      value = argv[++i];
    }
    // An empty value never means "the default": "--save=" would otherwise silently save nothing.
    CRUMB_CHECK(!value.empty(), "--", name, " needs a value, got an empty one (see --help)");
    // A network file goes into the record as its description (canonical), so a resumed run needs no file
    // and a reformatted file is the same run.
    if (name == "model-file" || name == "network") {
      CRUMB_CHECK(!given.count("model-file") || !given.count("network"),
                  "--model-file and --network both give the network: give one of them");
      if (name == "model-file") o.model_file = value;
      const std::string source = "--" + name + (name == "model-file" ? " " + value : "");
      value = network_json(parse_network(name == "model-file" ? read_network_file(value) : value, source));
      name = "network";
    }
    // Paths go into the record absolute, so a run resumed from another folder writes to the same files.
    static const std::set<std::string> paths = {"save", "load", "resume", "log", "report", "report-dir",
                                                "explain-csv", "data"};
    o.args.push_back("--" + name + "=" +
                     (paths.count(name) ? std::filesystem::absolute(value).lexically_normal().string() : value));
    if (name == "model") o.model = value;
    else if (name == "network") o.network = value;
    else if (name == "epochs") o.epochs = (int)parse_int(name, value, 0, 100000);
    else if (name == "batch") o.batch = (int)parse_int(name, value, 1, 1 << 24);
    else if (name == "micro-batch") o.micro_batch = (int)parse_int(name, value, 1, 1 << 24);
    else if (name == "norm") {
      CRUMB_CHECK(value == "bn" || value == "gn", "--norm must be bn or gn, got '", value, "'");
      o.norm.kind = value == "bn" ? models::NormSpec::Kind::Batch : models::NormSpec::Kind::Group;
    } else if (name == "bn-group") {
      o.norm.bn.group = value == "batch" ? 0 : (int)parse_int(name, value, 1, 1 << 24);
    } else if (name == "dropout") {
      o.dropout = parse_float(name, value, 0, 0.999999);
    } else if (name == "bn-stats") {
      CRUMB_CHECK(value == "deferred" || value == "per-group", "--bn-stats must be deferred or per-group, got '",
                  value, "'");
      o.norm.bn.stats = value == "deferred" ? BnStats::Deferred : BnStats::PerGroup;
    }
    else if (name == "optimizer") {
      CRUMB_CHECK(value == "sgd" || value == "adamw", "--optimizer must be sgd or adamw, got '", value, "'");
      opt.kind = value == "sgd" ? OptimizerKind::Sgd : OptimizerKind::AdamW;
    }
    else if (name == "lr") opt.lr = parse_float(name, value, 1e-12, 1e6);
    else if (name == "momentum") opt.momentum = parse_float(name, value, 0, 0.999999);
    else if (name == "weight-decay") opt.weight_decay = parse_float(name, value, 0, 1e3);
    else if (name == "beta1") opt.beta1 = parse_float(name, value, 0, 0.999999);
    else if (name == "beta2") opt.beta2 = parse_float(name, value, 0, 0.999999);
    else if (name == "eps") opt.eps = parse_float(name, value, 1e-30, 1);
    else if (name == "lr-schedule") {
      CRUMB_CHECK(value == "constant" || value == "step" || value == "cosine",
                  "--lr-schedule must be constant, step or cosine, got '", value, "'");
      opt.schedule.kind = value == "constant" ? LrSchedule::Kind::Constant
                          : value == "step"   ? LrSchedule::Kind::Step
                                              : LrSchedule::Kind::Cosine;
    }
    else if (name == "lr-step-size") opt.schedule.step_size = parse_int(name, value, 1, 1LL << 40);
    else if (name == "lr-gamma") opt.schedule.gamma = parse_float(name, value, 1e-12, 1);
    else if (name == "warmup-steps") opt.schedule.warmup_steps = parse_int(name, value, 0, 1LL << 40);
    else if (name == "device") {
      Device d;
      CRUMB_CHECK(device_named(value, d), "--device must be cpu or cuda, got '", value, "'");
      o.device = value;
    } else if (name == "threads") o.threads = (int)parse_int(name, value, 1, 1024);
    else if (name == "seed") o.seed = (uint64_t)parse_int(name, value, 0, (1LL << 62));
    else if (name == "data") {
      o.data = value;
    } else if (name == "dataset") {
      CRUMB_CHECK(value == "fashion-mnist" || value == "cifar10" || value == "synthetic" || value == "npy",
                  "--dataset must be fashion-mnist, cifar10, synthetic or npy, got '", value, "'");
      o.dataset = value;
    } else if (name == "augment") {
      CRUMB_CHECK(value == "none" || value == "crop-flip", "--augment must be none or crop-flip, got '", value, "'");
      o.augment = value == "crop-flip";
    } else if (name == "input") {
      // Each size digits only and range-checked: sscanf's %d would wrap 4294967297 to 1.
      const std::size_t x1 = value.find('x'), x2 = x1 == std::string::npos ? x1 : value.find('x', x1 + 1);
      CRUMB_CHECK(x2 != std::string::npos && value.find('x', x2 + 1) == std::string::npos,
                  "--input must be CxHxW with positive sizes, e.g. 3x32x32, got '", value, "'");
      o.input[0] = (int)parse_int("input channels", value.substr(0, x1), 1, 4096);
      o.input[1] = (int)parse_int("input height", value.substr(x1 + 1, x2 - x1 - 1), 1, 65536);
      o.input[2] = (int)parse_int("input width", value.substr(x2 + 1), 1, 65536);
      o.synthetic_shape = true;
    } else if (name == "classes") {
      o.classes = (int)parse_int(name, value, 2, 100000);
      o.synthetic_shape = true;
    }
    else if (name == "precision") {
      CRUMB_CHECK(precision_named(value, o.precision), "--precision must be fp32, tf32, bf16 or fp16, got '", value, "'");
    } else if (name == "loss-scale") {
      o.loss_scale.init = parse_float(name, value, 1, 0x1p64);
      o.loss_scale.validate();
    } else if (name == "loss-scale-growth-interval") {
      o.loss_scale.growth_interval = (int)parse_int(name, value, 1, 1 << 30);
    }
    else if (name == "channels-last") {
      CRUMB_CHECK(value == "on" || value == "off" || value == "auto", "--channels-last must be on, off or auto, got '",
                  value, "'");
      o.channels_last = value == "on" ? ChannelsLast::On : value == "off" ? ChannelsLast::Off : ChannelsLast::Auto;
    } else if (name == "cuda-graphs") {
      CRUMB_CHECK(value == "on" || value == "off", "--cuda-graphs must be on or off, got '", value, "'");
      o.cuda_graphs = value == "on";
    } else if (name == "fuse") {
      CRUMB_CHECK(value == "on" || value == "off", "--fuse must be on or off, got '", value, "'");
      o.fuse = value == "on";
    }
    else if (name == "limit-train") o.limit_train = (int)parse_int(name, value, 1, 1 << 30);
    else if (name == "limit-test") o.limit_test = (int)parse_int(name, value, 1, 1 << 30);
    else if (name == "memory-budget") o.memory_budget = parse_size(name, value);
    else if (name == "strategy") o.strategy = parse_strategy(value);
    else if (name == "save") o.save = value;
    else if (name == "bucket-cap") o.bucket_cap = parse_size(name, value);
    else if (name == "dist-timeout") o.dist_timeout = parse_float(name, value, 1e-3, 1e6);
    else if (name == "save-every") o.save_every = parse_int(name, value, 1, 1LL << 40);
    else if (name == "load") o.load = value;
    else if (name == "log") o.log = value;
    else if (name == "resume") o.resume = value;
    else if (name == "explain-csv") o.explain_csv = value, o.explain = true;
    else if (name == "report") o.report = value;
    else if (name == "report-dir") o.report_dir = value;
    else if (name == "sweep") {
      std::size_t start = 0;
      for (std::size_t comma; start <= value.size(); start = comma + 1) {
        comma = std::min(value.find(',', start), value.size());
        o.sweep.push_back((int)parse_int(name, value.substr(start, comma - start), 1, 1 << 24));
      }
    }
    else CRUMB_FAIL("unknown flag --", name, " (see --help)");
  }
  CRUMB_CHECK(!o.synthetic_shape || o.dataset == "synthetic", "--input and --classes need --dataset synthetic");
  CRUMB_CHECK(o.dataset != "synthetic" || o.data.empty(), "--dataset synthetic reads no files: drop --data");
  CRUMB_CHECK(o.dataset != "cifar10" || !o.data.empty() || o.help,
              "--dataset cifar10 needs --data DIR, the folder of the CIFAR-10 binary version");
  CRUMB_CHECK(o.dataset != "npy" || !o.data.empty() || o.help,
              "--dataset npy needs --data DIR, the folder of x.npy and y.npy");
  CRUMB_CHECK(o.micro_batch <= o.batch, "--micro-batch ", o.micro_batch, " is larger than --batch ", o.batch);
  for (int m : o.sweep) CRUMB_CHECK(m <= o.batch, "--sweep: micro-batch ", m, " is larger than --batch ", o.batch);
  CRUMB_CHECK(o.sweep.empty() || !o.explain,
              "--sweep measures training steps: drop --explain (its --report shows the planned sweep)");
  if (o.network.empty()) {
    check_applies(given, {"norm", "bn-group", "bn-stats"}, models::has_norm(o.model),
                  "a model with normalisation layers (resnet20, resnet18, resnet50, vgg11_bn)");
    check_applies(given, {"dropout"}, models::has_dropout(o.model), "a model with dropout (vgg11_bn)");
  } else {
    CRUMB_CHECK(!given.count("model"), "--model and --", given.count("network") ? "network" : "model-file",
                " both give the model: give one of them");
    const Network net = parse_network(o.network, "--network");
    o.model = net.name;
    check_applies(given, {"norm", "dropout"}, false,
                  "a named model: a network chooses its own layers (batch_norm2d or group_norm nodes; dropout "
                  "nodes with their own p)");
    check_applies(given, {"bn-group", "bn-stats"}, net.has_batch_norm(), "a network with batch_norm2d nodes");
  }
  check_applies(given, {"bn-group", "bn-stats"}, o.norm.kind == models::NormSpec::Kind::Batch, "--norm bn");
  CRUMB_CHECK(o.epochs > 0 || !o.load.empty() || o.explain || o.help, "--epochs 0 evaluates a checkpoint: it needs --load");
  check_applies(given, {"save-every"}, !o.save.empty(), "--save");
  CRUMB_CHECK(!given.count("tf32") || !given.count("precision"), "--tf32 is --precision tf32: give one of them");
  check_applies(given, {"loss-scale", "loss-scale-growth-interval"}, o.precision == Precision::FP16,
                "--precision fp16 (bf16 and float32 need no loss scale)");
  const bool sgd = opt.kind == OptimizerKind::Sgd;
  check_applies(given, {"momentum", "nesterov"}, sgd, "--optimizer sgd");
  check_applies(given, {"beta1", "beta2", "eps"}, !sgd, "--optimizer adamw");
  check_applies(given, {"lr-step-size", "lr-gamma"}, opt.schedule.kind == LrSchedule::Kind::Step, "--lr-schedule step");
  CRUMB_CHECK(!opt.nesterov || opt.momentum > 0, "--nesterov needs --momentum > 0");
  // The other optimizer's defaults where the flags did not set a value.
  const OptimizerConfig defaults = default_optimizer(opt.kind);
  if (!given.count("lr")) opt.lr = defaults.lr;
  if (!given.count("weight-decay")) opt.weight_decay = defaults.weight_decay;
  return o;
}

Options resume_flags(const std::vector<std::string>& recorded, const Options& given) {
  static const std::set<std::string> changeable = {"epochs", "save", "save-every", "log", "data", "threads",
                                                   "device", "memory-budget", "micro-batch", "cuda-graphs", "fuse", "deterministic",
                                                   "limit-test", "resume", "report", "report-dir", "sweep",
                                                   "strategy", "bucket-cap", "dist-timeout", "fresh-optimizer"};
  auto name_of = [](const std::string& arg) { return arg.substr(2, arg.find('=') - 2); };
  auto value_of = [](const std::string& arg) {
    const std::size_t eq = arg.find('=');
    return eq == std::string::npos ? std::string("(set)") : arg.substr(eq + 1);
  };
  // The starting weights came from --load; they now come from --resume.
  std::vector<std::string> run;
  for (const std::string& arg : recorded)
    if (name_of(arg) != "load" && name_of(arg) != "resume") run.push_back(arg);
  auto recorded_arg = [&](const std::string& name) -> const std::string* {
    const std::string* found = nullptr;
    for (const std::string& arg : recorded)
      if (name_of(arg) == name) found = &arg;
    return found;
  };
  // The original command line with --resume added is fine: a flag that leaves the run's result as
  // recorded is accepted; one that would change it is an error naming both values.
  const std::string settings = result_settings(config_of(parse_flags(run)));
  std::set<std::string> overridden;
  for (const std::string& arg : given.args) {
    const std::string name = name_of(arg);
    if (changeable.count(name)) {
      overridden.insert(name);
      continue;
    }
    const std::string* was = recorded_arg(name);
    if (name == "load") {
      CRUMB_CHECK(was && *was == arg, "--resume continues a run from its checkpoint: drop --load");
      continue;
    }
    std::vector<std::string> with;
    for (const std::string& r : run)
      if (name_of(r) != name) with.push_back(r);
    with.push_back(arg);
    // A description is long: it is shown by its network's name.
    auto shown = [&](const std::string& v) {
      return name == "network" ? "network '" + parse_network(v, "--network").name + "' (another description)" : v;
    };
    CRUMB_CHECK(result_settings(config_of(parse_flags(with))) == settings, "--", name,
                " cannot change when resuming: the run recorded ", was ? shown(value_of(*was)) : "its default",
                ", given ", shown(value_of(arg)), " (a resumed run continues with its recorded settings; it may set --epochs, --save, "
                "--save-every, --log, --data, --threads, --device, --memory-budget, --micro-batch, --cuda-graphs, --fuse, "
                "--deterministic, --limit-test, --report, --report-dir, --sweep, --strategy, --bucket-cap, --dist-timeout, "
                "--fresh-optimizer)");
  }
  std::vector<std::string> args;
  for (const std::string& arg : run)
    if (!overridden.count(name_of(arg))) args.push_back(arg);
  for (const std::string& arg : given.args)
    if (changeable.count(name_of(arg)) && name_of(arg) != "resume") args.push_back(arg);
  Options o = parse_flags(args);
  o.resume = given.resume;
  return o;
}

OptimizerConfig default_optimizer(OptimizerKind kind) {
  OptimizerConfig c;
  c.kind = kind;
  c.lr = kind == OptimizerKind::Sgd ? 0.05 : 1e-3;
  c.weight_decay = kind == OptimizerKind::Sgd ? 0.0 : 0.01;
  c.momentum = kind == OptimizerKind::Sgd ? 0.9 : 0.0;
  c.schedule.step_size = 1000;
  return c;
}

namespace {
// The flags as one printable string (what a checkpoint records): space-separated, with '%', spaces and
// control characters inside a flag percent-encoded.
std::string encode_args(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    for (unsigned char c : a) {
      if (c == '%' || c == ' ' || c < 0x20 || c == 0x7f) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", c);
        out += hex;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out;
}

}  // namespace

TrainConfig config_of(const Options& o) {
  TrainConfig c;
  c.model = o.model;
  c.network = o.network;
  c.norm = o.norm;
  c.dropout = o.dropout;
  c.data.dataset = o.dataset;
  c.data.dir = o.data;
  c.data.channels = o.input[0];
  c.data.height = o.input[1];
  c.data.width = o.input[2];
  c.data.classes = o.classes;
  c.data.limit_train = o.limit_train;
  c.data.limit_test = o.limit_test;
  c.data.seed = o.seed;
  c.augment = o.augment;
  c.epochs = o.epochs;
  c.batch = o.batch;
  c.micro_batch = o.micro_batch;
  c.optimizer = o.optimizer;
  Device device;
  if (device_named(o.device, device)) c.device = device;
  c.threads = o.threads;
  c.seed = o.seed;
  c.memory_budget = o.memory_budget;
  c.strategy = o.strategy;
  c.precision = o.precision;
  c.loss_scale = o.loss_scale;
  c.cuda_graphs = o.cuda_graphs;
  c.fuse = o.fuse;
  c.deterministic = o.deterministic;
  c.channels_last = o.channels_last;
  c.save = o.save;
  c.load = o.load;
  c.resume = o.resume;
  c.save_every = o.save_every;
  c.fresh_optimizer = o.fresh_optimizer;
  c.record = {{"train.args", encode_args(o.args)}};
  if (!o.model_file.empty()) c.files.push_back({"--model-file", o.model_file, false, ""});
  c.bucket_cap = o.bucket_cap;
  c.dist_timeout = o.dist_timeout;
  return c;
}

std::vector<std::string> recorded_args(const std::string& path) {
  const std::string text = recorded_value(checkpoint_metadata(path), "train.args", path);
  std::vector<std::string> args;
  std::string arg;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ' ') {
      args.push_back(arg);
      arg.clear();
    } else if (text[i] == '%') {
      const std::string hex = text.substr(i + 1, 2);
      CRUMB_CHECK(hex.size() == 2 && std::isxdigit(static_cast<unsigned char>(hex[0])) &&
                      std::isxdigit(static_cast<unsigned char>(hex[1])),
                  path, ": damaged \"train.args\" in its metadata");
      arg += static_cast<char>(std::stoi(hex, nullptr, 16));
      i += 2;
    } else {
      arg += text[i];
    }
  }
  if (!arg.empty()) args.push_back(arg);
  return args;
}

}  // namespace crumb::train
