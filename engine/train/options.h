// The options of a training run as one table. A row names an option (train's --micro-batch, Python's
// micro_batch=), its type, range or choices, default and help, the part of TrainConfig it fills, whether it
// changes the run's result, whether a resumed run may change it, and which clients take it. train's flags
// and its --help, the Python module's keyword arguments, their type hints and docstrings, what a checkpoint
// records and what --resume may change are all read from it, so they cannot drift apart.
//
//   Settings given = {setting(option("batch"), "256"), setting(option("micro-batch"), "32")};
//   TrainConfig cfg = configure(given);  // the defaults, the given options in table order, then validate()
//
// A client adds rows of its own (train: --report, --explain, ...) with no TrainConfig field: configure()
// skips them, the client reads their values from the settings.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/train/trainer.h"

namespace crumb {

enum class OptionType : uint8_t {
  Int,      // decimal digits in [lo, hi], or the row's word (bn-group's "batch")
  Float,    // a decimal number in [lo, hi]
  Size,     // bytes: "64MiB", "1.5GiB", "4096"
  Text,     // any text but an empty one
  Path,     // a file or folder, recorded absolute (a resumed run writes to the same files from anywhere)
  Choice,   // one of the row's choices
  Bool,     // on | off; a bare row is "--name" alone on the command line (on), never with a value
  IntList,  // "8,16,32", each in [lo, hi]
  Shape,    // "CxHxW": channels in [1, 4096], height and width in [1, 65536]
};
// "int", "float", "size", "text", "path", "choice", "bool", "ints", "shape".
const char* option_type_name(OptionType type);

// The clients that take an option (a bit set).
enum OptionClient : unsigned {
  kTrainFlag = 1,      // train --name
  kPythonTrainer = 2,  // crumb.Trainer(name=...)
  kPythonPlan = 4,     // crumb.plan(name=...)
};

// A value checked against its row.
struct OptionValue {
  std::string text;               // as given (Text, Path: absolute; Choice: the name)
  long long integer = 0;          // Int (the word: `word_value`), Size: bytes
  double number = 0;              // Float
  bool on = false;                // Bool
  std::vector<long long> ints;    // IntList; Shape: {C, H, W}
};

struct Option {
  std::string name;     // "micro-batch": train's --micro-batch, Python's micro_batch
  OptionType type = OptionType::Text;
  std::string metavar;  // its value in --help ("M"); none for a bare Bool
  std::string help;     // one paragraph; --help and the docstrings wrap it
  double lo = 0, hi = 0;             // Int, Float, IntList: the range
  std::vector<std::string> choices;  // Choice: the names; Int: a word it also takes (one at most)
  long long word_value = 0;          // what that word means
  bool bare = false;                 // Bool: "--name" alone, no value (Python: a bool all the same)
  // Where the default is not one value (it depends on other options or on the device): what it is.
  std::string default_help;
  bool result = false;     // changes what the run computes (result_settings lists it)
  bool resumable = false;  // a resumed run may set it; the others stay as the run recorded them
  unsigned clients = kTrainFlag;
  // Fills the option's part of a config; none for a client's own row.
  std::function<void(TrainConfig&, const OptionValue&)> set;
  // The value a config holds, as text in the option's syntax ("" where it holds none: no --micro-batch).
  std::function<std::string(const TrainConfig&)> get;
  // "" where the option applies to the config, else what it needs ("--optimizer sgd").
  std::function<std::string(const TrainConfig&)> needs;

  // The default as a value ("64", "on", "1x28x28"; get(TrainConfig{})), or "" where there is none or it
  // depends (default_help says).
  std::string default_value() const;
  // "(default 64)", "(default: the largest that fits ...)", or "".
  std::string default_text() const;
};

// An option as given: its row and its value in record form (paths absolute, a network canonical, a Bool
// "on" or "off"), checked.
struct Setting {
  const Option* option = nullptr;
  std::string value;
  const std::string& name() const { return option->name; }
};
using Settings = std::vector<Setting>;

// The engine's rows, in the order they apply (--optimizer, which sets the defaults of its
// hyper-parameters, before them) and --help lists them.
const std::vector<Option>& run_options();
// The row named `name` (nullptr if none).
const Option* find_option(const std::vector<Option>& table, const std::string& name);
// The names in `table` closest to a misspelt one (edit distance), best first: "micro-bach" -> micro-batch.
std::vector<std::string> closest_names(const std::vector<Option>& table, const std::string& name);

// Checks a value against its row; errors name the option ("--batch: 'x' is not an integer").
OptionValue parse_value(const Option& option, const std::string& value);
// The value checked and in record form.
Setting setting(const Option& option, const std::string& value);

// The config of `given` (no option twice): TrainConfig's defaults, then each given option in the table's
// order, each of which must apply to the result ("--momentum needs --optimizer sgd"), then validate().
// Rows without a field (a client's own) are skipped. The config records `given` for checkpoints
// ("train.args").
TrainConfig configure(const Settings& given);

// The settings of the run a --resume continues: the ones its checkpoint recorded (less --load), with the
// resumable ones from `given`. Any other option given must leave the run's result as recorded (so the
// original command line with --resume added is accepted, and a flag that equals the recorded value); one
// that would change it is an error naming the option and both values.
Settings resume_settings(const std::vector<Option>& table, const Settings& recorded, const Settings& given);

// The text a checkpoint records the settings in ("train.args": "--name=value" or "--name", space-separated,
// '%', spaces and control characters percent-encoded), and back, against `table`.
std::string record_of(const Settings& settings);
Settings settings_of_record(const std::vector<Option>& table, const std::string& record, const std::string& path);
// The settings recorded in the checkpoint at path (what --resume continues).
Settings recorded_settings(const std::vector<Option>& table, const std::string& path);
// `given`, or where it has --resume, the settings of the run it continues (resume_settings).
Settings resumed(const std::vector<Option>& table, const Settings& given);

}  // namespace crumb
