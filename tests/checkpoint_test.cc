// Checkpoints: exact round trips of parameters and optimizer state, the safetensors layout checked
// independently of the reader, files written by other implementations, clear one-line errors for
// mismatched models and corrupt files (leaving the model untouched), and atomic writes.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <limits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>

#include "engine/graph/autograd.h"
#include "engine/io/checkpoint.h"
#include "engine/base/error.h"
#include "engine/io/json.h"
#include "engine/graph/rng.h"
#include "engine/train/model_registry.h"
#include "tests/optimizer_configs.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

struct Model {
  Graph g;
  ParamStore params;
  std::unique_ptr<Optimizer> opt;
  Model(const std::string& name, uint64_t seed, float momentum = 0.9f)
      : Model(name, seed, sgd_config(0.05f, momentum, 1e-4f)) {}
  Model(const std::string& name, uint64_t seed, const OptimizerConfig& cfg)
      : g(build_graph(name)), params(g), opt(make_optimizer(params, cfg)) {
    params.init(seed);
  }
  static Graph build_graph(const std::string& name) {
    Graph g = models::build(name);
    build_backward(g);
    return g;
  }
  // Optimizer steps on pseudo-random gradients: enough to give momentum and a step count.
  void steps(int n, uint64_t seed) {
    Rng rng(seed);
    for (int s = 0; s < n; ++s) {
      for (ValueId p : g.params()) {
        float* gr = static_cast<float*>(params.grad(p));
        for (int64_t i = 0; i < g.value(p).count(1); ++i) gr[i] = static_cast<float>(rng.uniform() - 0.5);
      }
      opt->step();
    }
  }
  std::string param_bytes() const { return {static_cast<const char*>(params.data_block()), params.bytes()}; }
  // Every state block, in order.
  std::string state_bytes() const {
    std::string s;
    for (const StateBlock& b : opt->state()) s.append(b.block.host(), b.block.size());
    return s;
  }
};

std::string temp_path(const std::string& name) { return test::temp_path("ckpt", name + ".safetensors"); }

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// Whether a temporary file of a save to path is left over: "<file>.tmp.<pid>.<n>" beside it.
bool temporaries_left(const std::string& path) {
  const std::filesystem::path p(path);
  if (!std::filesystem::exists(p.parent_path())) return false;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(p.filename().string() + ".", 0) == 0 &&
        e.path().filename().string().find(".tmp.") != std::string::npos)
      return true;
  return false;
}

// A checkpoint is the model's file and its optimizer's beside it.
void remove_checkpoint(const std::string& path) {
  std::remove(path.c_str());
  std::remove(optimizer_path(path).c_str());
  std::remove(previous_optimizer_path(path).c_str());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string length_prefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// Writes a safetensors file from a raw header, as another implementation might.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_file(path, length_prefix(header.size()) + header + data);
}

struct Parts {
  std::string header, data;
};

Parts split(const std::string& path) {
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const std::size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

// A tensor entry plus its float32 data, for hand-made files.
struct Entry {
  std::string name;
  Dims dims;
  std::vector<float> values;
};

Entry entry_of(const Model& m, ValueId p, const std::string& name) {
  const float* d = static_cast<const float*>(m.params.data(p));
  return {name, m.g.value(p).dims, {d, d + m.g.value(p).count(1)}};
}

// Spaced JSON, `metadata` first, data packed in reverse header order: valid, but unlike what Crumb writes.
void write_entries(const std::string& path, const std::vector<Entry>& es, const std::string& metadata) {
  std::vector<uint64_t> begin(es.size());
  std::string data;
  for (std::size_t i = es.size(); i-- > 0;) {
    begin[i] = data.size();
    data.append(reinterpret_cast<const char*>(es[i].values.data()), es[i].values.size() * sizeof(float));
  }
  std::string h = "{" + metadata;
  for (std::size_t i = 0; i < es.size(); ++i) {
    h += (h.size() > 1 ? ", " : "") + json::quote(es[i].name) + ": {\"dtype\": \"F32\", \"shape\": [";
    for (std::size_t d = 0; d < es[i].dims.size(); ++d) h += (d ? ", " : "") + std::to_string(es[i].dims[d]);
    h += "], \"data_offsets\": [" + std::to_string(begin[i]) + ", " +
         std::to_string(begin[i] + es[i].values.size() * sizeof(float)) + "]}";
  }
  write_raw(path, h + "}", data);
}

// Expects load_checkpoint to throw a one-line crumb::Error naming the file and containing `what`.
void expect_load_error(const std::string& path, Model& m, const std::vector<std::string>& what) {
  const std::string before = m.param_bytes();
  try {
    load_checkpoint(path, m.params, m.opt.get());
    ADD_FAILURE() << "no error loading " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const std::string& w : what) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_EQ(m.param_bytes(), before) << "a failed load changed the parameters";
}

TEST(Checkpoint, RoundTripRestoresParamsMomentumAndSteps) {
  const std::string path = temp_path("roundtrip");
  Model a("lenet5", 1);
  a.steps(2, 7);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  EXPECT_FALSE(temporaries_left(path));

  Model b("lenet5", 2);
  b.steps(3, 8);
  ASSERT_NE(b.param_bytes(), a.param_bytes());
  load_checkpoint(path, b.params, b.opt.get());
  EXPECT_EQ(b.param_bytes(), a.param_bytes());
  EXPECT_EQ(b.state_bytes(), a.state_bytes());
  EXPECT_EQ(b.opt->steps(), 2);

  // Resuming is exact: the next step continues the momentum instead of restarting it.
  a.steps(1, 9);
  b.steps(1, 9);
  EXPECT_EQ(b.param_bytes(), a.param_bytes());
  remove_checkpoint(path);
}

// An optimizer saved before its first step (an fp16 run whose every step was skipped) resumes at step 0:
// its schedule and AdamW's bias corrections start where a fresh optimizer's do, not one step on.
TEST(Checkpoint, AnOptimizerSavedBeforeItsFirstStepResumesAtStepZero) {
  const std::string path = temp_path("zero_steps");
  for (const OptimizerConfig& cfg : {sgd_config(0.05, 0.9, 1e-4), adamw_config(1e-3, 0.01)}) {
    Model a("lenet5", 1, cfg);
    save_checkpoint(path, a.params, a.opt.get(), "lenet5");
    Model b("lenet5", 1, cfg);
    b.steps(2, 8);
    load_checkpoint(path, b.params, b.opt.get());
    EXPECT_EQ(b.opt->steps(), 0) << optimizer_name(cfg.kind);
    a.steps(2, 9);
    b.steps(2, 9);
    EXPECT_EQ(b.param_bytes(), a.param_bytes()) << optimizer_name(cfg.kind);
    EXPECT_EQ(b.state_bytes(), a.state_bytes()) << optimizer_name(cfg.kind);
    remove_checkpoint(path);
  }
}

// A mixed-precision model saves its float32 masters, not the 16-bit copies its ops read: its file is a
// float32 model's, so any precision loads any other's.
TEST(Checkpoint, MixedPrecisionSavesTheFloat32Masters) {
  const std::string path = temp_path("mixed");
  auto graph = [](DType dtype) {
    Graph g = models::build("lenet5", {}, dtype);
    build_backward(g);
    return g;
  };
  const Graph half = graph(DType::BF16), full = graph(DType::F32);
  ParamStore saved(half), as_f32(full), as_bf16(half);
  saved.init(1);
  as_f32.init(2);
  as_bf16.init(3);
  auto bytes = [](const ParamStore& p) { return std::string(static_cast<const char*>(p.data_block()), p.bytes()); };
  ASSERT_NE(bytes(as_f32), bytes(saved));
  save_checkpoint(path, saved, nullptr, "lenet5");
  load_checkpoint(path, as_f32, nullptr);
  load_checkpoint(path, as_bf16, nullptr);
  EXPECT_EQ(bytes(as_f32), bytes(saved));
  EXPECT_EQ(bytes(as_bf16), bytes(saved));
  remove_checkpoint(path);
}

TEST(Checkpoint, ParamsOnlyFileGivesFreshOptimizer) {
  const std::string path = temp_path("params_only");
  Model a("mlp", 1);
  save_checkpoint(path, a.params, nullptr, "mlp");
  EXPECT_EQ(split(path).header.find("optimizer"), std::string::npos);

  Model b("mlp", 2);
  b.steps(2, 3);
  load_checkpoint(path, b.params, b.opt.get());
  EXPECT_EQ(b.param_bytes(), a.param_bytes());
  EXPECT_EQ(b.opt->steps(), 0);
  EXPECT_EQ(b.state_bytes(), std::string(b.opt->state_bytes(), '\0'));

  // An optimizer without momentum takes the step count and ignores the momentum tensors.
  a.steps(2, 4);
  save_checkpoint(path, a.params, a.opt.get(), "mlp");
  Model c("mlp", 3, 0.0f);
  load_checkpoint(path, c.params, c.opt.get());
  EXPECT_EQ(c.param_bytes(), a.param_bytes());
  EXPECT_EQ(c.opt->steps(), 2);
  remove_checkpoint(path);
}

// The model's file alone (what PyTorch writes) starts a fresh optimizer; an optimizer file saved at
// another step than the model's (an interrupted save) is refused; saving without an optimizer removes a
// stale one.
TEST(Checkpoint, OptimizerFileIsPairedWithItsModelFile) {
  const std::string path = temp_path("paired"), other = temp_path("paired_other");
  Model a("lenet5", 1);
  a.steps(2, 7);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  a.steps(1, 8);
  save_checkpoint(other, a.params, a.opt.get(), "lenet5");
  ASSERT_EQ(std::rename(optimizer_path(other).c_str(), optimizer_path(path).c_str()), 0);
  Model b("lenet5", 2);
  expect_load_error(path, b, {optimizer_path(path), "does not belong to", "after 3 steps", "saved after 2"});

  std::remove(optimizer_path(path).c_str());
  load_checkpoint(path, b.params, b.opt.get());
  EXPECT_EQ(b.opt->steps(), 0);
  EXPECT_EQ(b.state_bytes(), std::string(b.opt->state_bytes(), '\0'));

  save_checkpoint(other, a.params, nullptr, "lenet5");
  EXPECT_FALSE(exists(optimizer_path(other)));
  remove_checkpoint(path);
  remove_checkpoint(other);
}

// A save killed between its two files (the new optimizer file written, the model file not yet) leaves the
// previous optimizer file beside, and loading pairs the model file with it: every interruption point of a
// save leaves a loadable pair of one step count.
TEST(Checkpoint, ASaveInterruptedBetweenItsFilesLeavesAPair) {
  const std::string path = temp_path("interrupted");
  Model a("lenet5", 1);
  a.steps(2, 7);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  const std::string model_then = read_file(path), optimizer_then = read_file(optimizer_path(path));
  EXPECT_FALSE(exists(previous_optimizer_path(path)));  // a complete save leaves no previous file
  a.steps(1, 8);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  auto put = [](const std::string& to, const std::string& bytes) { std::ofstream(to, std::ios::binary) << bytes; };
  // Killed after the optimizer file was replaced: the model file and the previous optimizer file are step 2's.
  put(path, model_then);
  put(previous_optimizer_path(path), optimizer_then);
  Model b("lenet5", 2);
  load_checkpoint(path, b.params, b.opt.get());
  EXPECT_EQ(b.opt->steps(), 2);
  EXPECT_TRUE(has_optimizer_file(path));
  // Killed after the optimizer file was set aside, before the new one was written.
  std::remove(optimizer_path(path).c_str());
  Model c("lenet5", 3);
  load_checkpoint(path, c.params, c.opt.get());
  EXPECT_EQ(c.opt->steps(), 2);
  EXPECT_EQ(c.state_bytes(), b.state_bytes());
  // The next save completes the pair and drops the previous file.
  save_checkpoint(path, c.params, c.opt.get(), "lenet5");
  EXPECT_FALSE(exists(previous_optimizer_path(path)));
  remove_checkpoint(path);
}

// A pair of one step count from two saves (a run started afresh over an earlier run's file, killed between
// its two files) is told apart by the save each file records: the model file loads with its own save's
// optimizer file, never the other run's momentum.
TEST(Checkpoint, APairIsOneSaveNotOneStepCount) {
  const std::string path = temp_path("one_save");
  Model a("lenet5", 1);
  a.steps(2, 7);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  const std::string model_then = read_file(path), optimizer_then = read_file(optimizer_path(path));
  Model fresh("lenet5", 4);
  fresh.steps(2, 9);  // another run at the same step count
  save_checkpoint(path, fresh.params, fresh.opt.get(), "lenet5");
  EXPECT_NE(read_file(optimizer_path(path)), optimizer_then);
  auto put = [](const std::string& to, const std::string& bytes) { std::ofstream(to, std::ios::binary) << bytes; };
  // Killed after the new optimizer file was written, before the model file: the first run's model file
  // beside the second run's optimizer file and the first run's as the previous one.
  put(path, model_then);
  put(previous_optimizer_path(path), optimizer_then);
  Model b("lenet5", 2);
  load_checkpoint(path, b.params, b.opt.get());
  Model c("lenet5", 3);
  put(optimizer_path(path), optimizer_then);
  std::remove(previous_optimizer_path(path).c_str());
  load_checkpoint(path, c.params, c.opt.get());
  EXPECT_EQ(b.state_bytes(), c.state_bytes()) << "the model file took the other save's optimizer file";
  // Without its own save's file, the other one is refused, not taken for it.
  save_checkpoint(path, fresh.params, fresh.opt.get(), "lenet5");
  const std::string other_optimizer = read_file(optimizer_path(path));
  put(path, model_then);
  put(optimizer_path(path), other_optimizer);
  Model d("lenet5", 5);
  expect_load_error(path, d, {optimizer_path(path), "does not belong to", "by another save"});
  remove_checkpoint(path);
}

// A diverged model is never saved (and the files already there stay as they were), and a file holding
// NaN or infinity is never loaded.
TEST(Checkpoint, NonFiniteValuesAreNeitherSavedNorLoaded) {
  const std::string path = temp_path("nonfinite");
  Model a("lenet5", 1);
  a.steps(1, 7);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  const std::string before = read_file(path), opt_before = read_file(optimizer_path(path));
  float* w = static_cast<float*>(a.params.data(a.g.find_value("3.weight")));
  const float keep = w[5];
  w[5] = NAN;
  a.params.to_device();
  const std::string msg = test::error_of([&] { save_checkpoint(path, a.params, a.opt.get(), "lenet5"); });
  EXPECT_NE(msg.find("refusing to write checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'3.weight' holds a non-finite value at element 5"), std::string::npos) << msg;
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(read_file(optimizer_path(path)), opt_before);

  // The same bytes written by another writer: loading refuses them.
  w[5] = keep;
  a.params.to_device();
  save_checkpoint(path, a.params, nullptr, "lenet5");
  std::string bytes = read_file(path);
  const Parts parts = split(path);
  const std::size_t at = bytes.size() - parts.data.size();  // the first tensor, 0.weight, starts the data
  const float inf = INFINITY;
  bytes.replace(at + 4 * 2, 4, reinterpret_cast<const char*>(&inf), 4);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  Model b("lenet5", 2);
  expect_load_error(path, b, {"tensor '0.weight' holds a non-finite value at element 2"});
  remove_checkpoint(path);
}

// AdamW's two state blocks and its step count round-trip, and resuming continues bit for bit (the bias
// corrections follow the restored count).
TEST(Checkpoint, RoundTripRestoresAdamWState) {
  const std::string path = temp_path("adamw");
  const OptimizerConfig cfg = adamw_config(1e-3, 0.01);
  Model a("lenet5", 1, cfg);
  a.steps(3, 7);
  save_checkpoint(path, a.params, a.opt.get(), "lenet5");
  const std::string header = split(optimizer_path(path)).header;
  EXPECT_NE(header.find("\"optimizer.exp_avg.11.bias\":{\"dtype\":\"F32\",\"shape\":[10],"), std::string::npos);
  EXPECT_NE(header.find("\"optimizer.exp_avg_sq.0.weight\":{\"dtype\":\"F32\",\"shape\":[6,1,5,5],"),
            std::string::npos);
  EXPECT_NE(header.find("\"optimizer\":\"adamw\",\"optimizer_steps\":\"3\""), std::string::npos) << header;

  Model b("lenet5", 2, cfg);
  b.steps(1, 8);
  load_checkpoint(path, b.params, b.opt.get());
  EXPECT_EQ(b.param_bytes(), a.param_bytes());
  EXPECT_EQ(b.state_bytes(), a.state_bytes());
  EXPECT_EQ(b.opt->steps(), 3);
  a.steps(2, 9);
  b.steps(2, 9);
  EXPECT_EQ(b.param_bytes(), a.param_bytes());
  remove_checkpoint(path);
}

// Another optimizer's state cannot be resumed: the error names both kinds and the flag to pass. A file
// with parameters only starts either optimizer afresh.
TEST(Checkpoint, OtherOptimizerKindIsAClearError) {
  const std::string path = temp_path("kind");
  Model adamw("mlp", 1, adamw_config(1e-3, 0.01));
  adamw.steps(1, 1);
  save_checkpoint(path, adamw.params, adamw.opt.get(), "mlp");
  Model sgd("mlp", 2);
  expect_load_error(path, sgd, {"holds the state of optimizer adamw", "uses sgd", "--optimizer adamw"});

  save_checkpoint(path, sgd.params, sgd.opt.get(), "mlp");
  Model other("mlp", 3, adamw_config(1e-3, 0.01));
  expect_load_error(path, other, {"holds the state of optimizer sgd", "uses adamw"});

  save_checkpoint(path, sgd.params, nullptr, "mlp");
  load_checkpoint(path, other.params, other.opt.get());
  EXPECT_EQ(other.opt->steps(), 0);
  EXPECT_EQ(other.state_bytes(), std::string(other.opt->state_bytes(), '\0'));
  remove_checkpoint(path);
}

// Optimizer tensors are checked against the kind the file names: AdamW needs both blocks.
TEST(Checkpoint, AdamWStateMustBeComplete) {
  const std::string path = temp_path("adamw_partial");
  Model m("mlp", 1, adamw_config(1e-3, 0.01));
  std::vector<Entry> es;
  for (ValueId p : m.g.params()) es.push_back(entry_of(m, p, m.g.value(p).name));
  std::vector<Entry> half = es;
  for (ValueId p : m.g.params()) half.push_back(entry_of(m, p, "optimizer.exp_avg." + m.g.value(p).name));
  write_entries(path, half, "\"__metadata__\": {\"optimizer\": \"adamw\"}");
  expect_load_error(path, m, {"optimizer state 'exp_avg_sq' is missing"});

  std::vector<Entry> stray = es;
  stray.push_back(entry_of(m, m.g.params()[0], "optimizer.momentum." + es[0].name));
  write_entries(path, stray, "\"__metadata__\": {\"optimizer\": \"adamw\"}");
  expect_load_error(path, m, {"unknown tensor 'optimizer.momentum.1.weight'", "no state of optimizer adamw"});

  write_entries(path, es, "\"__metadata__\": {\"optimizer\": \"lion\"}");
  expect_load_error(path, m, {"unknown optimizer \"lion\""});
  remove_checkpoint(path);
}

// The layout checked without the engine's reader: length prefix, header text, packed data.
TEST(Checkpoint, FileFollowsSafetensorsLayout) {
  const std::string path = temp_path("layout");
  Model m("lenet5", 1);
  m.steps(2, 5);
  save_checkpoint(path, m.params, m.opt.get(), "lenet5");
  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  const std::string header = bytes.substr(8, n), data = bytes.substr(8 + n);
  const std::size_t last = header.find_last_not_of(' ');
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(n - last - 1, 8u) << "padding is shorter than the alignment";

  EXPECT_NE(header.find("\"0.weight\":{\"dtype\":\"F32\",\"shape\":[6,1,5,5],\"data_offsets\":[0,600]}"),
            std::string::npos) << header;
  EXPECT_NE(header.find("\"7.weight\":{\"dtype\":\"F32\",\"shape\":[120,400],"), std::string::npos);
  // The optimizer's state is in its own file, so the model's is exactly a state_dict.
  EXPECT_EQ(header.find("optimizer.momentum"), std::string::npos);
  EXPECT_NE(split(optimizer_path(path)).header.find("\"optimizer.momentum.11.bias\":{\"dtype\":\"F32\",\"shape\":[10],"),
            std::string::npos);
  EXPECT_NE(header.find("\"__metadata__\":{\"format\":\"crumb\",\"model\":\"lenet5\",\"optimizer\":\"sgd\",\"optimizer_steps\":\"2\","
                        "\"save_id\":\""),
            std::string::npos) << header;

  // Tensors packed in header order, no gaps, covering the data section exactly.
  const std::regex entry_re("\"([^\"]+)\":\\{\"dtype\":\"F32\",\"shape\":\\[[0-9,]*\\],\"data_offsets\":\\[([0-9]+),([0-9]+)\\]\\}");
  uint64_t covered = 0;
  int tensors = 0;
  for (std::sregex_iterator it(header.begin(), header.end(), entry_re), end; it != end; ++it, ++tensors) {
    EXPECT_EQ(std::stoull((*it)[2]), covered) << (*it)[1];
    covered = std::stoull((*it)[3]);
  }
  EXPECT_EQ(tensors, static_cast<int>(m.g.params().size()));
  EXPECT_EQ(covered, data.size());
  EXPECT_EQ(data.size(), m.params.num_parameters() * sizeof(float));

  // The bytes of one tensor are the parameter's bytes.
  std::smatch bias;
  ASSERT_TRUE(std::regex_search(header, bias, std::regex("\"7.bias\":\\{[^}]*\"data_offsets\":\\[([0-9]+),([0-9]+)\\]")));
  const ValueId p = m.g.find_value("7.bias");
  const uint64_t b = std::stoull(bias[1]), e = std::stoull(bias[2]);
  ASSERT_EQ(e - b, 120 * sizeof(float));
  EXPECT_EQ(data.substr(b, e - b), std::string(static_cast<const char*>(m.params.data(p)), e - b));
  remove_checkpoint(path);
}

// Another writer's choices: metadata first and not ours, spaces, tensors in another order than the data.
TEST(Checkpoint, ReadsFilesFromOtherWriters) {
  const std::string path = temp_path("foreign");
  Model src("mlp", 1);
  std::vector<Entry> es;
  for (auto it = src.g.params().rbegin(); it != src.g.params().rend(); ++it)
    es.push_back(entry_of(src, *it, src.g.value(*it).name));
  write_entries(path, es, "\"__metadata__\": {\"format\": \"pt\"}");
  Model m("mlp", 2);
  m.steps(1, 1);
  load_checkpoint(path, m.params, m.opt.get());
  EXPECT_EQ(m.param_bytes(), src.param_bytes());
  EXPECT_EQ(m.opt->steps(), 0);

  write_entries(path, es, "");  // no metadata at all
  Model n("mlp", 3);
  load_checkpoint(path, n.params, nullptr);
  EXPECT_EQ(n.param_bytes(), src.param_bytes());
  remove_checkpoint(path);
}

// Momentum from a writer that records no step count: the optimizer counts as started, so its first
// step keeps the loaded momentum instead of overwriting it with the gradient.
TEST(Checkpoint, ForeignMomentumWithoutStepCountIsKept) {
  const std::string path = temp_path("foreign_momentum");
  Model src("mlp", 1);
  src.steps(2, 1);
  const float* block = static_cast<const float*>(src.params.data_block());
  std::vector<Entry> es;
  for (ValueId p : src.g.params()) {
    es.push_back(entry_of(src, p, src.g.value(p).name));
    const float* mom = src.opt->state()[0].host() + (static_cast<const float*>(src.params.data(p)) - block);
    es.push_back({"optimizer.momentum." + src.g.value(p).name, src.g.value(p).dims,
                  {mom, mom + src.g.value(p).count(1)}});
  }
  write_entries(path, es, "");
  Model m("mlp", 2);
  load_checkpoint(path, m.params, m.opt.get());
  EXPECT_EQ(m.opt->steps(), 1);
  const ValueId w = m.g.params()[0];
  const float* got = m.opt->state()[0].host() + (static_cast<const float*>(m.params.data(w)) -
                                               static_cast<const float*>(m.params.data_block()));
  EXPECT_EQ(std::vector<float>(got, got + m.g.value(w).count(1)), es[1].values);
  remove_checkpoint(path);
}

TEST(Checkpoint, WrongModelNamesTensorAndShapes) {
  const std::string path = temp_path("wrong_model");
  Model lenet("lenet5", 1);
  save_checkpoint(path, lenet.params, lenet.opt.get(), "lenet5");
  Model cnn("cnn", 1);
  expect_load_error(path, cnn, {"'0.weight'", "[6, 1, 5, 5]", "[32, 1, 3, 3]", "'lenet5'"});
  remove_checkpoint(path);
}

TEST(Checkpoint, MissingAndUnknownTensors) {
  const std::string path = temp_path("missing");
  Model m("mlp", 1);
  std::vector<Entry> es;
  for (ValueId p : m.g.params()) es.push_back(entry_of(m, p, m.g.value(p).name));

  std::vector<Entry> missing(es.begin(), es.end() - 1);
  write_entries(path, missing, "");
  expect_load_error(path, m, {"'5.bias'", "[10]", "missing"});

  std::vector<Entry> extra = es;
  extra.push_back({"9.weight", {2, 3}, std::vector<float>(6, 1.0f)});
  write_entries(path, extra, "");
  expect_load_error(path, m, {"unknown tensor '9.weight'", "[2, 3]"});

  std::vector<Entry> stray = es;
  stray.push_back({"optimizer.momentum.nope", {1}, {0.0f}});
  write_entries(path, stray, "");
  expect_load_error(path, m, {"unknown tensor 'optimizer.momentum.nope'"});

  std::vector<Entry> partial = es;
  partial.push_back(entry_of(m, m.g.params()[0], "optimizer.momentum." + es[0].name));
  write_entries(path, partial, "");
  expect_load_error(path, m, {"momentum of parameter '1.bias' is missing"});

  std::vector<Entry> bad_momentum = es;
  bad_momentum.push_back({"optimizer.momentum.1.bias", {3}, {0, 0, 0}});
  write_entries(path, bad_momentum, "");
  expect_load_error(path, m, {"'optimizer.momentum.1.bias'", "[3]", "[256]"});
  remove_checkpoint(path);
}

TEST(Checkpoint, CorruptFilesAreClearErrors) {
  const std::string good = temp_path("good"), path = temp_path("corrupt");
  Model m("lenet5", 1);
  m.steps(1, 1);
  save_checkpoint(good, m.params, m.opt.get(), "lenet5");
  const Parts g = split(good);
  const std::string bytes = read_file(good);
  const std::string w0 = "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[6,1,5,5],\"data_offsets\":[0,600]}";

  struct Case {
    const char* name;
    std::function<void()> make;
    std::vector<std::string> what;
  };
  const std::vector<Case> cases = {
      {"empty", [&] { write_file(path, ""); }, {"shorter than the 8-byte header length"}},
      {"short", [&] { write_file(path, bytes.substr(0, 5)); }, {"shorter than the 8-byte header length"}},
      {"truncated in header", [&] { write_file(path, bytes.substr(0, 100)); }, {"exceeds the file size"}},
      {"truncated in data", [&] { write_file(path, bytes.substr(0, bytes.size() - 10)); }, {"outside the data section"}},
      {"garbage length", [&] { write_file(path, length_prefix(~0ull) + bytes.substr(8)); }, {"exceeds the file size"}},
      {"not json", [&] { write_raw(path, "\x01\xff garbage\n", g.data); }, {"invalid JSON", "byte 0x01"}},
      {"json cut", [&] { write_raw(path, g.header.substr(0, 50), g.data); }, {"invalid JSON"}},
      {"json literal", [&] { write_raw(path, replaced(g.header, "\"F32\"", "true"), g.data); }, {"invalid JSON"}},
      {"json float", [&] { write_raw(path, replaced(g.header, "[6,1,5,5]", "[6,1,5,5.0]"), g.data); },
       {"invalid JSON", "only integers"}},
      {"json negative", [&] { write_raw(path, replaced(g.header, "[6,1,5,5]", "[6,1,5,-5]"), g.data); },
       {"invalid JSON"}},
      {"json escape", [&] { write_raw(path, replaced(g.header, "\"0.weight\"", "\"0.w\\u0065ight\""), g.data); },
       {"unsupported escape"}},
      {"json duplicate", [&] { write_raw(path, replaced(g.header, "\"0.bias\"", "\"0.weight\""), g.data); },
       {"duplicate key \"0.weight\""}},
      {"json trailing", [&] { write_raw(path, g.header + "x", g.data); }, {"after the end"}},
      {"not an object", [&] { write_raw(path, "[1, 2]", g.data); }, {"header must be a JSON object"}},
      {"dtype", [&] { write_raw(path, replaced(g.header, "\"F32\"", "\"F16\""), g.data); }, {"dtype F16", "only F32"}},
      {"no shape", [&] { write_raw(path, replaced(g.header, "\"shape\"", "\"shope\""), g.data); }, {"no \"shape\""}},
      {"shape vs size", [&] { write_raw(path, replaced(g.header, "[6,1,5,5]", "[6,1,5,4]"), g.data); },
       {"'0.weight'", "[6, 1, 5, 4]", "needs 480 bytes", "span 600"}},
      {"overlap", [&] { write_raw(path, replaced(g.header, "[600,624]", "[0,24]"), g.data); }, {"overlap"}},
      {"trailing data", [&] { write_raw(path, g.header, g.data + "12345678"); }, {"tensors cover"}},
      {"gap", [&] { write_raw(path, "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "12345678"); },
       {"4 unused bytes before tensor '0.weight'"}},
      {"offsets arity", [&] { write_raw(path, replaced(g.header, w0, replaced(w0, "[0,600]", "[0]")), g.data); },
       {"data_offsets must be [begin, end]"}},
      {"steps", [&] { write_raw(path, replaced(g.header, "\"optimizer_steps\":\"1\"", "\"optimizer_steps\":\"x\""), g.data); },
       {"optimizer_steps \"x\""}},
      {"metadata value", [&] { write_raw(path, replaced(g.header, "\"model\":\"lenet5\"", "\"model\":[1]"), g.data); },
       {"value 'model' must be a string"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    c.make();
    expect_load_error(path, m, c.what);
  }
  expect_load_error(temp_path("does_not_exist"), m, {"checkpoint", ": not found"});
  remove_checkpoint(good);
  remove_checkpoint(path);
}

// A float64 model (--precision fp64) saves its parameters and optimizer state as F64 and loads them back
// exactly; a float32 model refuses its file and it refuses a float32 model's, each saying which precision
// the file holds; a NaN in a float64 parameter is refused before anything is written.
TEST(Checkpoint, Float64ModelsRoundTrip) {
  auto graph = [](DType dtype) {
    Graph g = models::build("mlp", {}, dtype);
    build_backward(g);
    return g;
  };
  const Graph g = graph(DType::F64);
  const OptimizerConfig cfg = sgd_config(0.05, 0.9, 1e-4);
  ParamStore params(g);
  params.init(3);
  std::unique_ptr<Optimizer> opt = make_optimizer(params, cfg);
  Rng rng(4);
  for (int step = 0; step < 2; ++step) {
    for (ValueId p : g.params()) {
      auto* grad = static_cast<double*>(params.grad(p));
      for (int64_t i = 0; i < g.value(p).count(1); ++i) grad[i] = rng.uniform() - 0.5;
    }
    opt->step();
  }
  // Each parameter's values and momentum (the block's padding between parameters is not saved).
  auto same = [&](const ParamStore& a, const Optimizer& a_opt) {
    for (ValueId p : g.params()) {
      const std::size_t bytes = static_cast<std::size_t>(g.value(p).count(1)) * sizeof(double);
      if (std::memcmp(a.data(p), params.data(p), bytes) != 0) return false;
      const auto at = [&](const Optimizer& o, const ParamStore& s) {
        return static_cast<const char*>(o.state()[0].block.host()) + s.byte_offset(p);
      };
      if (std::memcmp(at(a_opt, a), at(*opt, params), bytes) != 0) return false;
    }
    return true;
  };
  const std::string path = temp_path("f64");
  save_checkpoint(path, params, opt.get(), "mlp");
  EXPECT_NE(split(path).header.find("\"dtype\":\"F64\""), std::string::npos) << split(path).header;
  EXPECT_EQ(split(path).header.find("\"dtype\":\"F32\""), std::string::npos) << split(path).header;
  ParamStore back(g);
  back.init(9);
  std::unique_ptr<Optimizer> back_opt = make_optimizer(back, cfg);
  load_checkpoint(path, back, back_opt.get());
  ASSERT_EQ(back_opt->state().size(), 1u);
  EXPECT_TRUE(same(back, *back_opt));
  EXPECT_EQ(back_opt->steps(), 2);

  Model f32("mlp", 1);
  const std::string before = f32.param_bytes();
  try {
    load_checkpoint(path, f32.params, f32.opt.get());
    ADD_FAILURE() << "a float32 model loaded a float64 checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is F64 but the model's is F32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--precision fp64"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f32.param_bytes(), before);
  const std::string path32 = temp_path("f32_into_f64");
  save_checkpoint(path32, f32.params, f32.opt.get(), "mlp");
  try {
    load_checkpoint(path32, back, back_opt.get());
    ADD_FAILURE() << "a float64 model loaded a float32 checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is F32 but the model's is F64"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same(back, *back_opt)) << "a failed load wrote";

  static_cast<double*>(params.data_block())[1] = std::numeric_limits<double>::quiet_NaN();
  const std::string diverged = temp_path("f64_nan");
  EXPECT_THROW(save_checkpoint(diverged, params, opt.get(), "mlp"), Error);
  EXPECT_FALSE(exists(diverged));
  for (const std::string& f : {path, path32, diverged}) remove_checkpoint(f);
}

// Keeps the file-size limit low for its lifetime, with SIGXFSZ ignored so write() fails with EFBIG
// instead of killing the process: the failure mode of a full disk, without filling one.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = saved_;
    lim.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  void (*old_handler_)(int);
};

TEST(Checkpoint, WritesAreAtomic) {
  Model m("lenet5", 1);
  const std::string missing_dir = ::testing::TempDir() + "crumb_no_such_dir_" + std::to_string(::getpid()) + "/c.safetensors";
  try {
    save_checkpoint(missing_dir, m.params, m.opt.get(), "lenet5");
    ADD_FAILURE() << "saved into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing_dir), std::string::npos) << e.what();
  }
  EXPECT_FALSE(temporaries_left(missing_dir));

  const std::string path = temp_path("atomic");
  save_checkpoint(path, m.params, m.opt.get(), "lenet5");
  const std::string first = read_file(path);
  m.steps(3, 2);
  save_checkpoint(path, m.params, m.opt.get(), "lenet5");
  EXPECT_NE(read_file(path), first);
  EXPECT_FALSE(temporaries_left(path));
  Model r("lenet5", 5);
  load_checkpoint(path, r.params, r.opt.get());
  EXPECT_EQ(r.opt->steps(), 3);
  EXPECT_EQ(r.param_bytes(), m.param_bytes());

  const std::string complete = read_file(path);
  m.steps(1, 3);
  std::string error = "no error";
  {
    // Nothing is reported inside: gtest's own output may be going to a file that is over the limit.
    const FileSizeLimit limit(4096);
    try {
      save_checkpoint(path, m.params, m.opt.get(), "lenet5");
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("cannot write checkpoint " + path), std::string::npos) << error;
  EXPECT_FALSE(temporaries_left(path));
  EXPECT_EQ(read_file(path), complete) << "a failed save damaged the previous checkpoint";
  remove_checkpoint(path);
}

TEST(CheckpointJson, ParsesTheSubsetAndRejectsTheRest) {
  const json::Value v = json::parse(" {\"a\\\"b\\\\\": {\"s\": \"x\", \"n\": [0, 18446744073709551615]}, \"e\": {}, \"l\": []} ",
                                    "t");
  ASSERT_EQ(v.members.size(), 3u);
  EXPECT_EQ(v.members[0].first, "a\"b\\");
  const json::Value* n = v.members[0].second.find("n");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->items.size(), 2u);
  EXPECT_EQ(n->items[0].integer, 0u);
  EXPECT_EQ(n->items[1].integer, 18446744073709551615ull);
  EXPECT_EQ(v.members[0].second.find("s")->string, "x");
  EXPECT_EQ(json::parse(json::quote("q\"\\z"), "t").string, "q\"\\z");
  EXPECT_THROW(json::quote("a\nb"), Error);

  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "{\"a\":";
  for (const std::string& bad : std::vector<std::string>{"", "{", "null", "true", "-1", "1.5", "1e3", "01", "18446744073709551616", "[[1]]",
                                "[\"a\"]", "{\"a\":1,}", "{\"a\" 1}", "\"a\\nb\"", "\"tab\there\"", "{} {}", deep}) {
    try {
      json::parse(bad, "src");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("src: invalid JSON at byte ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace crumb
