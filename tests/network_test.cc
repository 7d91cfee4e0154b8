// Networks as data (engine/train/network.h): a description of a registered model builds its graph and
// trains to its bytes; a residual DAG trains like the registered ResNet from the same weights; micro-batching
// stays exact; the canonical form round-trips; every mistake in a description is one error line naming
// the node and what to do. Also the JSON reader's Full grammar that descriptions use.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/base/error.h"
#include "engine/io/json.h"
#include "engine/train/network.h"
#include "engine/train/trainer.h"
#include "tests/small_run.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

using test::small_run;
using test::synthetic_data;

// The cnn model (models/cnn.cc) written as a description, with the nodes named as its layers.
const char* kCnn = R"({"name": "my_cnn", "nodes": [
  {"name": "0", "op": "conv2d", "inputs": ["x"], "in_channels": 1, "out_channels": 32, "kernel_size": 3, "padding": 1},
  {"name": "1", "op": "relu"},
  {"name": "2", "op": "max_pool2d", "kernel_size": 2},
  {"name": "3", "op": "conv2d", "out_channels": 64, "kernel_size": 3, "stride": 1, "padding": 1, "bias": true},
  {"name": "4", "op": "relu", "inputs": ["3"]},
  {"name": "5", "op": "max_pool2d", "kernel_size": 2, "stride": 2},
  {"name": "6", "op": "flatten"},
  {"name": "7", "op": "linear", "out_features": 128},
  {"name": "8", "op": "relu"},
  {"name": "9", "op": "linear", "in_features": 128, "out_features": 4}],
  "output": "9"})";

// lenet5 (models/lenet5.cc), nodes listed without inputs (each takes the one before).
const char* kLenet5 = R"({"name": "my_lenet5", "nodes": [
  {"name": "0", "op": "conv2d", "out_channels": 6, "kernel_size": 5, "padding": 2}, {"name": "1", "op": "relu"},
  {"name": "2", "op": "max_pool2d", "kernel_size": 2}, {"name": "3", "op": "conv2d", "out_channels": 16, "kernel_size": 5},
  {"name": "4", "op": "relu"}, {"name": "5", "op": "max_pool2d", "kernel_size": 2}, {"name": "6", "op": "flatten"},
  {"name": "7", "op": "linear", "out_features": 120}, {"name": "8", "op": "relu"},
  {"name": "9", "op": "linear", "out_features": 84}, {"name": "10", "op": "relu"},
  {"name": "11", "op": "linear", "out_features": 10}]})";

std::vector<char> weights(Trainer& t) {
  const char* p = static_cast<const char*>(t.params().data_block());
  return {p, p + t.params().bytes()};
}

// Every node's op, name and input/output shapes, and every parameter and state, in order.
std::string graph_text(const Graph& g) {
  std::string s;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    s += std::string(n.def->name) + " " + n.name + ":";
    for (ValueId v : n.in) s += " " + g.value(v).name + dims_str(g.value(v).dims);
    s += " ->";
    for (ValueId v : n.out) s += " " + dims_str(g.value(v).dims);
    s += "\n";
  }
  for (ValueId v : g.params()) s += "param " + g.value(v).name + dims_str(g.value(v).dims) + "\n";
  for (ValueId v : g.states()) s += "state " + g.value(v).name + dims_str(g.value(v).dims) + "\n";
  return s;
}

std::string temp_path(const std::string& name) { return test::temp_path("network", name); }

TEST(NetworkJson, FullGrammarReadsWhatDescriptionsUse) {
  const json::Value v = json::parse(R"({"b": [true, false], "n": [-1, 0.5, 1e-5, 2E+3, -0.0, 7], "o": [{"a": []}]})",
                                    "t", json::Grammar::Full);
  const std::vector<json::Value>& b = v.find("b")->items;
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].kind, json::Value::Kind::Boolean);
  EXPECT_TRUE(b[0].boolean);
  EXPECT_FALSE(b[1].boolean);
  const std::vector<json::Value>& n = v.find("n")->items;
  ASSERT_EQ(n.size(), 6u);
  EXPECT_EQ(n[0].kind, json::Value::Kind::Number);
  EXPECT_EQ(n[0].number, -1.0);
  EXPECT_EQ(n[1].number, 0.5);
  EXPECT_EQ(n[2].number, 1e-5);
  EXPECT_EQ(n[3].number, 2000.0);
  EXPECT_EQ(n[5].kind, json::Value::Kind::Integer);
  EXPECT_EQ(n[5].integer, 7u);
  EXPECT_EQ(n[5].number, 7.0);
  EXPECT_EQ(v.find("o")->items[0].find("a")->kind, json::Value::Kind::Array);
  for (const char* bad : {"null", "tru", "-", "1.", "1e", ".5", "01", "-01", "1e999", "[1,]", "[true false]"}) {
    try {
      json::parse(bad, "src", json::Grammar::Full);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("src: invalid JSON at byte ", 0), 0u) << e.what();
    }
  }
  // Nesting is bounded through arrays too.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_THROW(json::parse(deep, "src", json::Grammar::Full), Error);
  // The Subset grammar of safetensors headers still refuses them.
  EXPECT_THROW(json::parse("[true]", "src"), Error);
  EXPECT_THROW(json::parse("{\"a\": 0.5}", "src"), Error);
}

// A description of a registered model builds exactly its graph, and trains to its bytes.
TEST(Network, DescriptionOfARegisteredModelIsThatModel) {
  for (const auto& [model, text] : {std::pair<const char*, const char*>{"cnn", kCnn}, {"lenet5", kLenet5}}) {
    TrainConfig named = small_run();
    named.model = model;
    named.epochs = 1;
    if (std::string(model) == "lenet5") {
      named.data.height = named.data.width = 28;
      named.data.classes = 10;
    }
    TrainConfig mine = named;
    mine.network = text;
    const auto data = synthetic_data(named);
    Trainer a(named, data), b(mine, data);
    EXPECT_EQ(graph_text(a.graph()), graph_text(b.graph())) << model;
    EXPECT_EQ(b.config().model, std::string("my_") + model);
    const FitResult ra = a.fit(), rb = b.fit();
    EXPECT_EQ(ra.last_loss, rb.last_loss) << model;
    EXPECT_EQ(weights(a), weights(b)) << model;
  }
}

// resnet20 (models/resnet.cc) as a description: a stem, three stages of BasicBlocks, projection shortcuts.
std::string resnet20_description() {
  std::string nodes;
  auto node = [&](const std::string& text) { nodes += (nodes.empty() ? "" : ",\n") + text; };
  auto conv_bn = [&](const std::string& conv, const std::string& bn, const std::string& in, int out, int k, int stride) {
    node(R"({"name": ")" + conv + R"(", "op": "conv2d", "inputs": [")" + in + R"("], "out_channels": )" +
         std::to_string(out) + R"(, "kernel_size": )" + std::to_string(k) + R"(, "stride": )" + std::to_string(stride) +
         R"(, "padding": )" + std::to_string(k / 2) + R"(, "bias": false})");
    node(R"({"name": ")" + bn + R"(", "op": "batch_norm2d"})");
  };
  conv_bn("conv1", "bn1", "x", 16, 3, 1);
  node(R"({"name": "relu", "op": "relu"})");
  std::string h = "relu";
  int channels = 16;
  const int planes[] = {16, 32, 64};
  for (int stage = 0; stage < 3; ++stage)
    for (int i = 0; i < 3; ++i) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      const int stride = stage > 0 && i == 0 ? 2 : 1;
      conv_bn(p + ".conv1", p + ".bn1", h, planes[stage], 3, stride);
      node(R"({"name": ")" + p + R"(.relu1", "op": "relu"})");
      conv_bn(p + ".conv2", p + ".bn2", p + ".relu1", planes[stage], 3, 1);
      std::string shortcut = h;
      if (stride != 1 || channels != planes[stage]) {
        conv_bn(p + ".downsample.0", p + ".downsample.1", h, planes[stage], 1, stride);
        shortcut = p + ".downsample.1";
      }
      node(R"({"name": ")" + p + R"(.add", "op": "add", "inputs": [")" + p + R"(.bn2", ")" + shortcut + R"("]})");
      node(R"({"name": ")" + p + R"(.relu2", "op": "relu"})");
      h = p + ".relu2";
      channels = planes[stage];
    }
  node(R"({"name": "avgpool", "op": "adaptive_avg_pool2d", "output_size": [1, 1]})");
  node(R"({"name": "flatten", "op": "flatten"})");
  node(R"({"name": "fc", "op": "linear", "out_features": 4})");
  return "{\"name\": \"resnet20_dag\", \"nodes\": [\n" + nodes + "]}";
}

// The residual DAG has resnet20's parameters and, started from the same weights, trains to its bytes.
TEST(Network, ResidualDagTrainsLikeTheRegisteredResNet) {
  TrainConfig named = small_run();
  named.model = "resnet20";
  named.epochs = 1;
  named.norm.bn.group = 4;
  named.data.limit_train = 40;
  TrainConfig mine = named;
  mine.network = resnet20_description();
  const auto data = synthetic_data(named);
  const std::string start = temp_path("resnet20_start.safetensors");
  Trainer a(named, data);
  a.prepare();
  a.save(start);
  mine.load = start;
  Trainer b(mine, data);
  std::vector<std::string> pa, pb;
  for (ValueId v : a.graph().params()) pa.push_back(a.graph().value(v).name + dims_str(a.graph().value(v).dims));
  for (ValueId v : b.graph().params()) pb.push_back(b.graph().value(v).name + dims_str(b.graph().value(v).dims));
  EXPECT_EQ(pa, pb);
  const FitResult ra = a.fit(), rb = b.fit();
  EXPECT_EQ(ra.last_loss, rb.last_loss);
  EXPECT_EQ(weights(a), weights(b));
  EXPECT_EQ(ra.test.loss, rb.test.loss);
  std::filesystem::remove(start);
  std::filesystem::remove(optimizer_path(start));
}

// A custom net with BatchNorm groups, a residual add, GroupNorm, average pooling and dropout trains to the
// same weights in micro-batches of 4 as in whole batches of 16 (float32 reordering only).
TEST(Network, MicroBatchingAnOwnNetworkIsExact) {
  const std::string net = R"({"name": "mixed", "nodes": [
    {"name": "stem", "op": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
    {"name": "bn", "op": "batch_norm2d", "num_features": 8, "group": 4, "momentum": 0.2, "eps": 0.001},
    {"name": "act", "op": "relu"},
    {"name": "branch", "op": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1},
    {"name": "gn", "op": "group_norm", "num_groups": 2, "num_channels": 8},
    {"name": "sum", "op": "add", "inputs": ["gn", "act"]},
    {"name": "pool", "op": "avg_pool2d", "kernel_size": 2},
    {"name": "mp", "op": "max_pool2d", "kernel_size": 3, "stride": 2, "padding": 1},
    {"name": "ada", "op": "adaptive_avg_pool2d", "output_size": 2},
    {"name": "flat", "op": "flatten"},
    {"name": "drop", "op": "dropout", "p": 0.25},
    {"name": "fc", "op": "linear", "in_features": 32, "out_features": 4}]})";
  const auto [micro, whole] = test::micro_and_whole(net, 4);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, double(std::fabs(whole[i] - micro[i])));
    scale = std::max(scale, double(std::fabs(whole[i])));
  }
  EXPECT_LE(worst / scale, 1e-5);
}

// Layout does not matter: equal networks give one canonical text, which parses back to itself and is what
// checkpoints record.
TEST(Network, CanonicalFormRoundTripsAndIsRecorded) {
  const std::string canonical = network_json(parse_network(kCnn, "t"));
  std::string squeezed = kCnn;
  squeezed.erase(std::remove(squeezed.begin(), squeezed.end(), '\n'), squeezed.end());
  EXPECT_EQ(network_json(parse_network(squeezed, "t")), canonical);
  EXPECT_EQ(network_json(parse_network(canonical, "t")), canonical);
  EXPECT_EQ(canonical.find('\n'), std::string::npos);
  const std::string odd = R"({"nodes": [{"name": "bn", "op": "batch_norm2d", "group": "batch", "momentum": 0.3333333333333333},
    {"name": "p", "op": "adaptive_avg_pool2d", "output_size": [1, 1]}, {"name": "f", "op": "flatten"},
    {"name": "d", "op": "dropout", "p": 0.1}, {"name": "fc", "op": "linear", "out_features": 3, "bias": false}]})";
  const std::string c2 = network_json(parse_network(odd, "t"));
  EXPECT_EQ(network_json(parse_network(c2, "t")), c2);
  EXPECT_NE(c2.find("\"group\":\"batch\""), std::string::npos) << c2;
  EXPECT_NE(c2.find("\"momentum\":0.33333333333333331"), std::string::npos) << c2;
  EXPECT_EQ(parse_network(odd, "t").name, "network");

  TrainConfig c = small_run();
  c.network = kCnn;
  c.epochs = 1;
  c.save = temp_path("cnn.safetensors");
  Trainer t(c, synthetic_data(c));
  t.fit();
  EXPECT_EQ(recorded_value(checkpoint_metadata(c.save), "train.network", c.save), canonical);
  EXPECT_EQ(recorded_value(checkpoint_metadata(c.save), "model", c.save), "my_cnn");
  // What a resumed run and the ranks compare: the description, not its layout.
  TrainConfig other = c;
  other.network = squeezed;
  EXPECT_EQ(result_settings(c), result_settings(other));
  other.network = kLenet5;
  EXPECT_NE(result_settings(c), result_settings(other));
  std::filesystem::remove(c.save);
  std::filesystem::remove(optimizer_path(c.save));
}

// A description of these nodes.
std::string with_nodes(const std::string& nodes) { return "{\"name\": \"bad\", \"nodes\": [" + nodes + "]}"; }

const std::string kHead = R"({"name": "f", "op": "flatten"}, {"name": "fc", "op": "linear", "out_features": 4})";

// Every mistake is one line that names the network, the node and what to do.
TEST(Network, EveryMistakeIsOneErrorNamingTheNode) {
  const std::string conv = R"({"name": "c", "op": "conv2d", "out_channels": 4, "kernel_size": 3)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", "a network description must be a JSON object"},
      {"{\"nodes\": [}", "desc: invalid JSON at byte"},
      {R"({"nodes": []})", "\"nodes\" must be a non-empty array"},
      {R"({"nodes": [], "layers": 1})", "unknown key \"layers\""},
      {with_nodes(R"({"name": "c", "op": "conv3d"})"), "node 'c': unknown op 'conv3d' (known: adaptive_avg_pool2d, add, avg_pool2d, batch_norm2d"},
      {with_nodes(R"({"op": "relu"})"), "network 'bad': node 0: \"name\" is missing"},
      {with_nodes(R"({"name": "x", "op": "relu"})"), "the name 'x' is reserved"},
      {with_nodes(conv + "}, " + conv + "}"), "two nodes are named 'c'"},
      {with_nodes(conv + ", \"kernel\": 3}"), "node 'c' (conv2d): unknown attribute \"kernel\" (conv2d takes: out_channels"},
      {with_nodes(R"({"name": "c", "op": "conv2d", "kernel_size": 3})"), "node 'c' (conv2d): \"out_channels\" is missing (conv2d needs out_channels, kernel_size)"},
      {with_nodes(R"({"name": "c", "op": "conv2d", "out_channels": 4, "kernel_size": [3, 3]})"), "\"kernel_size\" must be an integer, found an array (Crumb's windows are square"},
      {with_nodes(conv + ", \"bias\": 1}"), "\"bias\" must be true or false"},
      {with_nodes(conv + ", \"stride\": 0}"), "\"stride\" is 0, outside [1, "},
      {with_nodes(conv + ", \"padding\": -1}"), "\"padding\" is -1, outside [0, "},
      {with_nodes(conv + ", \"padding\": 1.5}"), "\"padding\" must be an integer, found a number"},
      {with_nodes(R"({"name": "d", "op": "dropout", "p": 1})"), "node 'd' (dropout): p must be in [0, 1)"},
      {with_nodes(R"({"name": "b", "op": "batch_norm2d", "group": "all"})"), "\"group\" must be an integer or \"batch\""},
      {with_nodes(R"({"name": "b", "op": "batch_norm2d", "eps": 0})"), "eps must be > 0"},
      {with_nodes(R"({"name": "a", "op": "add", "inputs": ["x"]})"), "node 'a' (add) takes 2 inputs, got 1"},
      {with_nodes(R"({"name": "r", "op": "relu", "inputs": ["nowhere"]})"), "input 'nowhere' is not a node"},
      {with_nodes(R"({"name": "r", "op": "relu", "inputs": ["s"]}, {"name": "s", "op": "relu", "inputs": ["r"]})"),
       "node 'r' (relu): input 's' comes after it (list the nodes so that every input comes first; cycles"},
      {with_nodes(R"({"name": "r", "op": "relu", "inputs": ["r"]})"), "input 'r' is the node itself (a cycle)"},
      {with_nodes(R"({"name": "r", "op": "relu", "inputs": "x"})"), "\"inputs\" must be an array of node names"},
      {with_nodes(R"({"name": "dead", "op": "relu"}, {"name": "r", "op": "relu", "inputs": ["x"]}, )" + kHead),
       "node 'dead' does not lead to the output 'fc'"},
      {with_nodes(kHead) + "x", "invalid JSON"},
      {R"({"nodes": [{"name": "r", "op": "relu"}], "output": "q"})", "output 'q' is not a node"},
  };
  for (const auto& [text, what] : cases) {
    try {
      parse_network(text, "desc");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // Shapes: checked when built for the data (1x12x12 images, 4 classes).
  const std::vector<std::pair<std::string, std::string>> built = {
      {with_nodes(conv + "}, " + R"({"name": "p", "op": "max_pool2d", "kernel_size": 2},
                  {"name": "c2", "op": "conv2d", "out_channels": 8, "kernel_size": 1, "inputs": ["c"]},
                  {"name": "a", "op": "add", "inputs": ["c2", "p"]}, )" + kHead),
       "network 'bad': node 'a' (add): its inputs 'c2' [8, 10, 10] and 'p' [4, 5, 5] differ in shape"},
      {with_nodes(conv + ", \"in_channels\": 3}, " + kHead), "node 'c' (conv2d): in_channels is 3 but its input 'x' has 1"},
      {with_nodes(R"({"name": "fc", "op": "linear", "out_features": 4})"),
       "node 'fc' (linear): input 'x' is per-sample [1, 12, 12], not [features] (put a flatten node before it)"},
      {with_nodes(R"({"name": "f", "op": "flatten"}, {"name": "fc", "op": "linear", "out_features": 5})"),
       "the output 'fc' gives per-sample [5] but the loss needs [4]"},
      {with_nodes(conv + "}, {\"name\": \"g\", \"op\": \"group_norm\", \"num_groups\": 3}, " + kHead),
       "node 'g' (group_norm): num_groups 3 does not divide the 4 channels"},
      {with_nodes(R"({"name": "p", "op": "max_pool2d", "kernel_size": 13}, )" + kHead),
       "network 'bad': layer 'p' (max_pool2d): window 13x13 is larger than the input"},
      {with_nodes(R"({"name": "f0", "op": "flatten"}, {"name": "c", "op": "conv2d", "out_channels": 2, "kernel_size": 1}, )" + kHead),
       "node 'c' (conv2d): input 'f0' is per-sample [144], not [channels, height, width]"},
      // Sizes past what the kernels index, found by the layer that makes them, in 64-bit arithmetic (a padding
      // of 2^24 once failed in fc.backward_data, the layers' int sizes having wrapped).
      {with_nodes(conv + ", \"padding\": 16777216}, " + kHead),
       "layer 'c' (conv2d): output 'c' would be per-sample [4, 33554442, 33554442], about 4.5036e+15 elements, more "
       "than the 2147483647 (2^31 - 1) a sample may hold (check the layer's sizes, kernel, stride and padding against "
       "its inputs 'x' [1, 12, 12]"},
      {with_nodes(R"({"name": "c", "op": "conv2d", "out_channels": 16777216, "kernel_size": 16777216}, )" + kHead),
       "parameter 'c.weight' would be [16777216, 1, 16777216, 16777216], about 4.72237e+21 elements, more than the "
       "281474976710656 (2^48) a value may hold"},
      {with_nodes(R"({"name": "c", "op": "conv2d", "out_channels": 1, "kernel_size": 65536, "padding": 32768}, )" + kHead),
       "layer 'c' (conv2d): its window of 65536x65536 holds more than 2^31 - 1 elements"},
      {with_nodes(R"({"name": "p", "op": "max_pool2d", "kernel_size": 16777216, "padding": 8388608}, )" + kHead),
       "layer 'p' (max_pool2d): its window of 16777216x16777216 holds more than 2^31 - 1 elements"},
      {with_nodes(R"({"name": "c", "op": "conv2d", "out_channels": 131072, "kernel_size": 1}, {"name": "f", "op": "flatten"},
                  {"name": "w", "op": "linear", "out_features": 16777216}, {"name": "fc", "op": "linear", "out_features": 4})"),
       "parameter 'w.weight' would be [16777216, 18874368], about 3.16659e+14 elements, more than the 281474976710656"},
  };
  for (const auto& [text, what] : built) {
    try {
      build_network(text, {1, 12, 12, 4});
      ADD_FAILURE() << "built: " << text;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // A node's BatchNorm group larger than the batch, found when the run is planned.
  TrainConfig c = small_run();
  c.network = with_nodes(R"({"name": "b", "op": "batch_norm2d", "group": 32}, )" + kHead);
  try {
    Trainer t(c, synthetic_data(c));
    ADD_FAILURE() << "planned a group of 32 in batches of 16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'b' normalises groups of 32 samples, more than the batch of 16"),
              std::string::npos)
        << e.what();
  }
}

// Names reach the run's JSON summary and checkpoint headers, which must be UTF-8 (safetensors refuses a header
// that is not): a description whose text is not UTF-8 is refused at the byte, and UTF-8 names are kept.
TEST(Network, NamesMustBeUtf8) {
  for (const std::string& bad : {std::string("c\xff"), std::string("c\xc0\xaf"), std::string("c\xed\xa0\x80"),
                                std::string("c\xe2\x82")}) {
    const std::string text = with_nodes(R"({"name": ")" + bad + R"(", "op": "flatten"}, )" +
                                        R"({"name": "fc", "op": "linear", "out_features": 4})");
    const std::string msg = test::error_of([&] { parse_network(text, "desc"); });
    EXPECT_NE(msg.find("desc: invalid JSON at byte 37: a string that is not UTF-8"), std::string::npos) << msg;
    EXPECT_TRUE(json::valid_utf8(msg)) << "the message itself shows the byte in hex";
  }
  const std::string name = "\xe5\x8d\xb7\xe7\xa7\xaf\xf0\x9f\x98\x80";  // two CJK characters and an emoji
  const Network net = parse_network(with_nodes(R"({"name": "f", "op": "flatten"}, {"name": ")" + name +
                                               R"(", "op": "linear", "out_features": 4})"),
                                    "desc");
  EXPECT_EQ(net.nodes[1].name, name);
  EXPECT_EQ(parse_network(network_json(net), "canonical").nodes[1].name, name);
  // Writing refuses what reading would: nothing that is not UTF-8 gets into JSON.
  EXPECT_NE(test::error_of([] { json::quote("fc\xff.weight"); }).find("cannot write \"fc...\" as JSON: byte 2 is not UTF-8"),
            std::string::npos);
  EXPECT_THROW(json::parse("{\"a\xff\": 1}", "header"), Error) << "safetensors headers (the Subset grammar) too";
}

// A description of n nodes parses, and is refused for a mistake in its last node, in time linear in n: 10 MB
// of nodes (267,000 relus) took 3 minutes to refuse when every input was looked up by scanning the nodes
// before it; now it is a second, bounded here generously for a loaded machine.
TEST(Network, TenMegabyteDescriptionsParseInLinearTime) {
  std::string nodes = R"({"name": "f", "op": "flatten"}, {"name": "fc", "op": "linear", "out_features": 4})";
  int n = 0;
  for (; nodes.size() < (std::size_t{10} << 20); ++n) {
    const std::string input = n == 0 ? "fc" : "relu" + std::to_string(n - 1);
    nodes += ", {\"name\": \"relu" + std::to_string(n) + "\", \"op\": \"relu\", \"inputs\": [\"" + input + "\"]}";
  }
  const std::string valid = with_nodes(nodes);
  auto seconds = [](auto&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  Network net;
  EXPECT_LT(seconds([&] { net = parse_network(valid, "big"); }), 5.0);
  EXPECT_EQ(net.nodes.size(), static_cast<std::size_t>(n) + 2);
  const std::string wrong_input = valid.substr(0, valid.size() - 5) + "x\"]}]}";  // the last input: "relu...x"
  const std::string wrong_op = valid.substr(0, valid.rfind("\"relu\"")) + "\"relu7\", \"inputs\": [\"fc\"]}]}";  // no such op
  for (const std::string* text : {&wrong_input, &wrong_op}) {
    std::string msg;
    EXPECT_LT(seconds([&] { msg = test::error_of([&] { parse_network(*text, "big"); }); }), 5.0);
    EXPECT_NE(msg.find("node 'relu" + std::to_string(n - 1) + "'"), std::string::npos) << msg.substr(0, 300);
  }
  // The graph of a long description builds in linear time too (parameter names are looked up by hash).
  std::string linears = R"({"name": "f", "op": "flatten"})";
  for (int i = 0; i < 50000; ++i) linears += ", {\"name\": \"l" + std::to_string(i) + "\", \"op\": \"linear\", \"out_features\": 4}";
  EXPECT_LT(seconds([&] { build_network(with_nodes(linears), {1, 2, 2, 4}); }), 5.0);
}

}  // namespace
}  // namespace crumb
