// The option table (engine/train/options.h): every row's value checks, its default and its classification
// (changes the result or not, may change on resume or not) hold; configure() applies options in the
// table's order and checks them across options; TrainConfig::validate() checks a C++ program's config the
// same way; the record a checkpoint keeps reads back; resume keeps a run's settings, accepting a given one
// that equals the recorded value.
#include <gtest/gtest.h>

#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "engine/train/network.h"
#include "engine/train/options.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

using test::error_of;

const Option& row(const std::string& name) {
  const Option* o = find_option(run_options(), name);
  EXPECT_NE(o, nullptr) << name;
  return *o;
}

// Settings from (name, value) pairs.
Settings given(const std::vector<std::pair<std::string, std::string>>& pairs) {
  Settings out;
  for (const auto& [name, value] : pairs) out.push_back(setting(row(name), value));
  return out;
}

Settings plus(Settings base, const Setting& s) {
  base.push_back(s);
  return base;
}

const char* const kNetwork = R"({"name": "tiny", "nodes": [{"name": "bn", "op": "batch_norm2d"},
  {"name": "f", "op": "flatten"}, {"name": "fc", "op": "linear", "out_features": 10}]})";

// The first of a few runs to which the option applies (momentum: the default SGD; beta1: AdamW; ...).
Settings applying_base(const Option& o) {
  const std::vector<Settings> bases = {
      {},
      given({{"optimizer", "adamw"}}),
      given({{"lr-schedule", "step"}}),
      given({{"precision", "fp16"}}),
      given({{"dataset", "synthetic"}}),
      given({{"model", "resnet20"}}),
      given({{"model", "vgg11_bn"}}),
      given({{"save", "/tmp/crumb_options_test.st"}}),
      given({{"resume", "/tmp/crumb_options_test.st"}}),
  };
  for (const Settings& b : bases)
    if (!o.needs || o.needs(configure(b)).empty()) return b;
  ADD_FAILURE() << "no run takes --" << o.name;
  return {};
}

// A valid value of the option other than the one `c` holds.
std::string other_value(const Option& o, const TrainConfig& c) {
  const std::string now = o.get(c);
  if (o.name == "dataset") return "synthetic";  // the others need files
  if (o.name == "model") return now == "cnn" ? "mlp" : "cnn";
  if (o.name == "network") return kNetwork;
  switch (o.type) {
    case OptionType::Int: {
      const long long lo = static_cast<long long>(o.lo);
      return std::to_string(now == std::to_string(lo) ? lo + 1 : lo);
    }
    case OptionType::Float: {
      const bool at_lo = !now.empty() && parse_value(o, now).number == o.lo;
      std::ostringstream os;
      os << std::setprecision(17) << (at_lo ? o.hi : o.lo);
      return os.str();
    }
    case OptionType::Size: return now == "1MiB" ? "2MiB" : "1MiB";
    case OptionType::Path: return "/tmp/crumb_options_other";
    case OptionType::Choice:
      for (const std::string& name : o.choices)
        if (name != now) return name;
      break;
    case OptionType::Bool: return now == "on" ? "off" : "on";
    case OptionType::Shape: return now == "3x8x8" ? "1x8x8" : "3x8x8";
    default: break;
  }
  ADD_FAILURE() << "no other value for --" << o.name;
  return "";
}

TEST(Options, EveryRowIsComplete) {
  for (const Option& o : run_options()) {
    SCOPED_TRACE(o.name);
    EXPECT_EQ(o.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-"), std::string::npos);
    EXPECT_FALSE(o.help.empty());
    EXPECT_TRUE(o.set && o.get);
    EXPECT_TRUE(o.metavar.empty() == o.bare);
    EXPECT_FALSE(o.result && o.resumable) << "a setting that changes the result cannot change on resume";
    EXPECT_NE(o.clients & kTrainFlag, 0u);
    if (o.type == OptionType::Choice) {
      EXPECT_GE(o.choices.size(), 2u);
    }
    // The stated default is a valid value, and giving it changes nothing.
    const std::string d = o.default_value();
    if (d.empty()) continue;
    const Settings base = applying_base(o);
    EXPECT_EQ(result_settings(configure(plus(base, setting(o, d)))), result_settings(configure(base)));
    EXPECT_EQ(o.get(configure(plus(base, setting(o, d)))), d);
  }
}

// result_settings holds exactly the rows marked result; the others (threads, budget, paths, ...) may change
// on resume, as they leave the run's result alone. tf32 (--precision's alias) and --load are neither.
TEST(Options, ResultRowsChangeTheResultAndResumableOnesDoNot) {
  for (const Option& o : run_options()) {
    if (!o.result && !o.resumable) continue;
    SCOPED_TRACE(o.name);
    const Settings base = applying_base(o);
    const TrainConfig before = configure(base);
    const std::string value = other_value(o, before);
    const TrainConfig after = configure(plus(base, setting(o, value)));
    EXPECT_NE(o.get(after), o.get(before)) << value;
    EXPECT_EQ(result_settings(after) != result_settings(before), o.result) << value;
  }
}

TEST(Options, ValuesAreCheckedWithTheFlagsMessages) {
  EXPECT_EQ(error_of([] { parse_value(row("batch"), "x"); }), "--batch: 'x' is not an integer");
  EXPECT_EQ(error_of([] { parse_value(row("batch"), " 8"); }), "--batch: ' 8' is not an integer");
  EXPECT_EQ(error_of([] { parse_value(row("batch"), "0"); }), "--batch: 0 is out of range [1, 16777216]");
  EXPECT_EQ(error_of([] { parse_value(row("lr"), "nan"); }), "--lr: 'nan' is not a number");
  EXPECT_EQ(error_of([] { parse_value(row("lr"), "+1"); }), "--lr: '+1' is not a number");
  EXPECT_EQ(error_of([] { parse_value(row("optimizer"), "adam"); }), "--optimizer must be sgd or adamw, got 'adam'");
  EXPECT_EQ(error_of([] { parse_value(row("cuda-graphs"), "yes"); }), "--cuda-graphs must be on or off, got 'yes'");
  EXPECT_NE(error_of([] { parse_value(row("memory-budget"), "lots"); }).find("--memory-budget: 'lots' is not a size"),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse_value(row("input"), "3x8"); }),
            "--input must be CxHxW with positive sizes, e.g. 3x32x32, got '3x8'");
  EXPECT_EQ(error_of([] { parse_value(row("input"), "3x0x8"); }), "--input height: 0 is out of range [1, 65536]");
  EXPECT_EQ(error_of([] { parse_value(row("save"), ""); }), "--save needs a value, got an empty one");
  EXPECT_EQ(parse_value(row("bn-group"), "batch").integer, 0);
  EXPECT_EQ(parse_value(row("memory-budget"), "1.5KiB").integer, 1536);
  EXPECT_EQ(setting(row("loss-scale"), "1024").value, "1024");
  EXPECT_EQ(setting(row("save"), "/tmp/a/../b.st").value, "/tmp/b.st");
  EXPECT_EQ(closest_names(run_options(), "micro-bach").at(0), "micro-batch");
  EXPECT_EQ(closest_names(run_options(), "learning-rate"), std::vector<std::string>{});
}

TEST(Options, ConfigureAppliesTheTableInOrder) {
  // --optimizer sets its hyper-parameters' defaults first, whatever the order given.
  for (const Settings& s : {given({{"lr", "0.2"}, {"optimizer", "adamw"}}), given({{"optimizer", "adamw"}, {"lr", "0.2"}})}) {
    const TrainConfig c = configure(s);
    EXPECT_EQ(c.optimizer.kind, OptimizerKind::AdamW);
    EXPECT_EQ(c.optimizer.lr, 0.2);
    EXPECT_EQ(c.optimizer.weight_decay, 0.01);
  }
  EXPECT_EQ(configure(given({{"optimizer", "adamw"}})).optimizer.lr, 1e-3);
  EXPECT_EQ(configure({}).optimizer.lr, 0.05);
  const TrainConfig c = configure(given({{"cuda-graphs", "off"}, {"seed", "7"}, {"network", kNetwork}}));
  EXPECT_FALSE(c.cuda_graphs);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.data.seed, 7u);
  EXPECT_EQ(c.model, "tiny");
  EXPECT_EQ(c.record.at(0).first, "train.args");
  EXPECT_EQ(c.record.at(0).second.rfind("--cuda-graphs=off --seed=7 --network={", 0), 0u) << c.record.at(0).second;
}

// Given, an option must apply, even at its default value.
TEST(Options, GivenOptionsMustApply) {
  EXPECT_EQ(error_of([] { configure(given({{"beta1", "0.9"}})); }), "--beta1 needs --optimizer adamw");
  EXPECT_EQ(error_of([] { configure(given({{"momentum", "0.9"}, {"optimizer", "adamw"}})); }),
            "--momentum needs --optimizer sgd");
  EXPECT_EQ(error_of([] { configure(given({{"precision", "bf16"}, {"loss-scale", "1024"}})); }),
            "--loss-scale needs --precision fp16 (bf16 and float32 need no loss scale)");
  EXPECT_NE(error_of([] { configure(given({{"bn-group", "8"}})); })
                .find("--bn-group needs a model with normalisation layers (resnet18, resnet20, resnet50, vgg11_bn"),
            std::string::npos);
  EXPECT_EQ(error_of([] { configure(given({{"model", "resnet20"}, {"norm", "gn"}, {"bn-stats", "deferred"}})); }),
            "--bn-stats needs --norm bn");
  EXPECT_EQ(error_of([] { configure(given({{"model", "cnn"}, {"network", kNetwork}})); }),
            "--model and --network both give the model: give one of them");
  EXPECT_EQ(error_of([] { configure(given({{"tf32", "on"}, {"precision", "fp32"}})); }),
            "--tf32 is --precision tf32: give one of them");
  EXPECT_EQ(error_of([] { configure(given({{"batch", "8"}, {"micro-batch", "9"}})); }),
            "--micro-batch 9 is larger than --batch 8");
  EXPECT_EQ(error_of([] { configure(given({{"classes", "3"}})); }), "--classes needs --dataset synthetic");
  EXPECT_EQ(configure(given({{"network", kNetwork}, {"bn-group", "8"}})).norm.bn.group, 8);
}

// A C++ program's config gets the same checks: a setting that does not apply must keep its default, and the
// Trainer refuses the config before it reads any data.
TEST(Options, ValidateChecksAProgramsConfig) {
  TrainConfig c;
  c.optimizer.kind = OptimizerKind::AdamW;  // SGD's momentum left as it was: AdamW ignores it
  c.validate();
  c.optimizer.momentum = 0.5;
  EXPECT_EQ(error_of([&] { c.validate(); }), "--momentum needs --optimizer sgd");
  c = TrainConfig();
  c.data.dir = "/nonexistent/crumb";
  c.micro_batch = 100;
  EXPECT_EQ(error_of([&] { Trainer t(c); }), "--micro-batch 100 is larger than --batch 64");
  c = TrainConfig();
  c.norm.bn.group = 8;
  EXPECT_NE(error_of([&] { c.validate(); }).find("--bn-group needs a model with normalisation layers"),
            std::string::npos);
  c.model = "resnet20";
  c.validate();
  c = TrainConfig();
  c.fresh_optimizer = true;
  EXPECT_EQ(error_of([&] { c.validate(); }), "--fresh-optimizer needs --resume");
  c = TrainConfig();
  c.save_every = 10;
  EXPECT_EQ(error_of([&] { c.validate(); }), "--save-every needs --save");
  c = TrainConfig();
  c.data.dataset = "cifar10";
  EXPECT_NE(error_of([&] { c.validate(); }).find("--dataset cifar10 needs --data DIR"), std::string::npos);
  c = TrainConfig();
  c.optimizer.schedule.gamma = 0.5;
  EXPECT_EQ(error_of([&] { c.validate(); }), "--lr-gamma needs --lr-schedule step");
  // A network replaces the model, whatever `model` says.
  c = TrainConfig();
  c.model = "resnet20";
  c.network = kNetwork;
  c.validate();
}

TEST(Options, RecordReadsBack) {
  const Settings s = given({{"model", "cnn"}, {"nesterov", "on"}, {"deterministic", "off"}, {"save", "/tmp/a b%.st"},
                            {"input", "3x8x8"}, {"dataset", "synthetic"}});
  const std::string text = record_of(s);
  EXPECT_EQ(text, "--model=cnn --nesterov --save=/tmp/a%20b%25.st --input=3x8x8 --dataset=synthetic");
  const Settings back = settings_of_record(run_options(), text, "ck.st");
  ASSERT_EQ(back.size(), 5u);
  EXPECT_EQ(back[1].name(), "nesterov");
  EXPECT_EQ(back[1].value, "on");
  EXPECT_EQ(back[2].value, "/tmp/a b%.st");
  EXPECT_EQ(record_of(back), text);
  // UTF-8 stays as it is; bytes that are not UTF-8 (a Linux path may hold any) and DEL are percent-encoded, so
  // the record is valid UTF-8 for the checkpoint header and reads back to the same bytes.
  const std::string path = "/tmp/caf\xc3\xa9/\xff\xc3(\xe2\x82\x7f\xf0\x9f\x98\x80";
  const std::string odd = record_of(given({{"data", path}}));
  EXPECT_EQ(odd, "--data=/tmp/caf\xc3\xa9/%FF%C3(%E2%82%7F\xf0\x9f\x98\x80");
  EXPECT_TRUE(json::valid_utf8(odd));
  EXPECT_EQ(settings_of_record(run_options(), odd, "ck.st").at(0).value, path);
  // As older versions wrote them: bare flags, --tf32.
  EXPECT_EQ(configure(settings_of_record(run_options(), "--model=cnn --tf32 --batch=32", "old.st")).precision,
            Precision::TF32);
  EXPECT_EQ(error_of([] { settings_of_record(run_options(), "--bogus=1", "ck.st"); }),
            "ck.st records --bogus, which this version of Crumb does not know");
  EXPECT_EQ(error_of([] { settings_of_record(run_options(), "--batch=1%4", "ck.st"); }),
            "ck.st: damaged \"train.args\" in its metadata");
  EXPECT_EQ(error_of([] { settings_of_record(run_options(), "--nesterov=on", "ck.st"); }),
            "ck.st: damaged \"train.args\" in its metadata ('--nesterov=on')");
  EXPECT_EQ(error_of([] { settings_of_record(run_options(), "--batch=0", "ck.st"); }),
            "ck.st records a value this version refuses: --batch: 0 is out of range [1, 16777216]");
}

// What --resume continues: the recorded settings, the resumable ones given, and any other given as recorded
// (issue 37: --loss-scale of an fp16 run was refused with "needs --precision fp16").
TEST(Options, ResumeKeepsTheRunsSettings) {
  const Settings recorded = settings_of_record(
      run_options(), "--model=cnn --precision=fp16 --loss-scale=1024 --batch=32 --load=/tmp/w.st --save=/tmp/a.st",
      "ck.st");
  auto resume = [&](std::vector<std::pair<std::string, std::string>> pairs) {
    pairs.insert(pairs.begin(), {"resume", "/tmp/a.st"});
    return resume_settings(run_options(), recorded, given(pairs));
  };
  const Settings same = resume({{"loss-scale", "1024"}, {"precision", "fp16"}, {"lr", "0.05"}, {"model", "cnn"}});
  const TrainConfig c = configure(same);
  EXPECT_EQ(c.loss_scale.init, 1024);
  EXPECT_EQ(c.precision, Precision::FP16);
  EXPECT_EQ(c.batch, 32);
  EXPECT_EQ(c.resume, "/tmp/a.st");
  EXPECT_TRUE(c.load.empty());  // the weights come from the checkpoint now
  // Resumable ones are taken as given, checked against the run's settings, not train's defaults.
  const TrainConfig more = configure(resume({{"epochs", "3"}, {"micro-batch", "16"}, {"save", "/tmp/b.st"}}));
  EXPECT_EQ(more.epochs, 3);
  EXPECT_EQ(more.micro_batch, 16);
  EXPECT_EQ(more.save, "/tmp/b.st");
  EXPECT_EQ(error_of([&] { configure(resume({{"micro-batch", "48"}})); }), "--micro-batch 48 is larger than --batch 32");
  // What would change the result is refused, naming both values.
  const std::string may = "a resumed run continues with its recorded settings; it may set --epochs, --micro-batch";
  std::string e = error_of([&] { resume({{"loss-scale", "2048"}}); });
  EXPECT_EQ(e.rfind("--loss-scale cannot change when resuming: the run recorded 1024, given 2048 (" + may, 0), 0u) << e;
  e = error_of([&] { resume({{"lr", "0.1"}}); });
  EXPECT_EQ(e.rfind("--lr cannot change when resuming: the run recorded its default, given 0.1", 0), 0u) << e;
  // Another precision would leave the recorded --loss-scale without fp16: that is a change of the run.
  e = error_of([&] { resume({{"precision", "bf16"}}); });
  EXPECT_EQ(e.rfind("--precision cannot change when resuming: the run recorded fp16, given bf16", 0), 0u) << e;
  // An option that does not apply to the run says what it needs.
  EXPECT_EQ(error_of([&] { resume({{"beta1", "0.9"}}); }), "--beta1 needs --optimizer adamw");
  EXPECT_EQ(error_of([&] { resume({{"load", "/tmp/other.st"}}); }),
            "--resume continues a run from its checkpoint: drop --load");
  e = error_of([&] { resume({{"network", kNetwork}}); });
  EXPECT_EQ(e.rfind("--network cannot change when resuming: the run recorded its default, given network 'tiny' "
                    "(another description)", 0), 0u) << e;
}

}  // namespace
}  // namespace crumb
