// Command-line flags of `train`: "--name value" or "--name=value"; every value is validated and a bad
// one is a one-line error naming the flag.
#pragma once
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/train/trainer.h"

namespace crumb::train {

// train's defaults: SGD at lr 0.05 with momentum 0.9; AdamW with PyTorch's (lr 1e-3, weight decay 0.01).
OptimizerConfig default_optimizer(OptimizerKind kind);

struct Options {
  std::string model = "lenet5";  // with --model-file or --network: the network's name
  std::string network;           // --model-file / --network: the description, canonical (network_json)
  std::string model_file;        // --model-file: where it was read (an input no output may replace)
  int epochs = 1;
  int batch = 64;
  int micro_batch = 0;  // 0: the whole batch
  models::NormSpec norm;  // --norm, --bn-group, --bn-stats (models with normalisation layers)
  double dropout = 0.5;   // --dropout (models with dropout)
  // --optimizer and its hyper-parameters, --lr-schedule; the cosine horizon is set by the run.
  OptimizerConfig optimizer = default_optimizer(OptimizerKind::Sgd);
  std::string device;  // "cpu" | "cuda"; empty: cuda when a GPU is usable, else cpu
  int threads = 2;
  uint64_t seed = 0;
  std::string dataset = "fashion-mnist";  // "fashion-mnist" | "cifar10" | "synthetic"
  int input[3] = {1, 28, 28};              // synthetic: channels, height, width
  int classes = 10;                        // synthetic
  bool augment = false;                    // --augment crop-flip
  bool synthetic_shape = false;            // --input or --classes was given
  std::string data;     // empty: $CRUMB_DATA or Debian's dataset-fashion-mnist (Fashion-MNIST only)
  int limit_train = 0;  // 0: all training samples
  int limit_test = 0;   // 0: all test samples
  std::size_t memory_budget = 0;  // bytes; 0: the device's default (Backend::default_budget)
  Strategy strategy = Strategy::Auto;  // --strategy: micro-batching, swapping, recomputation (engine/strategy/memory_strategy.h)
  std::string save, load;  // checkpoint paths (safetensors)
  long long save_every = 0;  // --save-every N optimizer steps (0: at epoch ends only)
  std::string log;         // --log FILE.jsonl: a line per step and per epoch
  std::string resume;      // --resume FILE: continue the run saved there
  bool fresh_optimizer = false;  // --fresh-optimizer: resume without the checkpoint's optimizer file
  // Every flag as given, normalised to "--name" or "--name=value", in order (what a checkpoint records).
  std::vector<std::string> args;
  Precision precision = Precision::FP32;  // --precision (--tf32 is --precision tf32)
  LossScaleConfig loss_scale;             // fp16: --loss-scale, --loss-scale-growth-interval
  bool cuda_graphs = true;   // replay each micro-batch's work as a recorded CUDA graph
  bool fuse = true;          // fuse chains of ops after autograd (TrainConfig::fuse)
  bool deterministic = false;  // CUDA: only algorithms that repeat their bits (Graph::deterministic)
  ChannelsLast channels_last = ChannelsLast::Auto;  // --channels-last
  bool explain = false;
  std::string explain_csv;
  std::string report;       // --report FILE.html
  std::string report_dir;   // --report-dir DIR: the report's pictures as SVG and tables as CSV
  std::vector<int> sweep;   // --sweep m1,m2,...: micro-batch sizes of measured trials
  std::size_t bucket_cap = std::size_t{25} << 20;  // --bucket-cap: bytes per gradient bucket under mpirun
  double dist_timeout = 300;  // --dist-timeout: seconds a collective may take under mpirun
  bool help = false;
};

// Throws crumb::Error on an unknown flag or a bad value.
Options parse_flags(int argc, char** argv);
Options parse_flags(const std::vector<std::string>& args);

// The flags of the run that --resume continues: the ones recorded in its checkpoint (`recorded`, as
// Options::args), with those a resumed run may change (--epochs, --save, --save-every, --log, --data,
// --threads, --device, --memory-budget, --micro-batch, --cuda-graphs, --limit-test, --report, --report-dir,
// --sweep, --strategy, --bucket-cap, --dist-timeout) taken from `given`. Any other flag in `given` must
// leave the run's result as recorded (result_settings), so the original command line with --resume
// added is accepted; one that would change it is an error naming the flag and both values.
Options resume_flags(const std::vector<std::string>& recorded, const Options& given);
const char* usage();
// The Trainer's config for the options; it records the flags in every checkpoint ("train.args").
TrainConfig config_of(const Options& o);
// The flags recorded in the checkpoint at path (what --resume continues).
std::vector<std::string> recorded_args(const std::string& path);

}  // namespace crumb::train
