// Command-line flags of `train`: "--name value" or "--name=value", the rows of the engine's option table
// (engine/train/options.h) and train's own (--model-file, --explain, --report, ...). Every value is checked
// by its row, and a bad one is a one-line error naming the flag; --help is generated from the same rows.
#pragma once
#include <string>
#include <vector>

#include "engine/train/options.h"

namespace crumb::train {

// The engine's rows with train's own among them, in --help's order.
const std::vector<Option>& flag_table();

struct Options {
  TrainConfig config;  // the run; it records `settings` in its checkpoints
  Settings settings;   // every flag (--model-file as --network), with --resume those of the run it continues
  std::string model_file;  // --model-file: where it was read (an input no output may replace)
  bool explain = false, frontier = false;
  std::string explain_csv, report, report_dir;
  std::vector<int> sweep;
};

// The flags as settings, each value checked. An unknown flag ("did you mean ...?"), a repeated one, a
// missing or empty value is an error; nothing across flags is checked yet (a resumed run's flags go with
// the ones it recorded first).
// model_file: where --model-file was read, when given (the run's settings hold its description, but the
// file stays an input that no output may replace).
Settings parse_flags(int argc, char** argv, std::string* model_file = nullptr);
Settings parse_flags(const std::vector<std::string>& args, std::string* model_file = nullptr);
bool wants_help(const Settings& given);

// The run of the flags: with --resume, of the run it continues (resume_settings); then checked across
// flags (TrainConfig::validate and train's own: --sweep, --epochs 0).
Options options_of(const Settings& given);

// --help, from flag_table().
std::string usage();

}  // namespace crumb::train
