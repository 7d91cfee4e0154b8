#include "tools/train/flags.h"

#include <cerrno>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>

#include "engine/base/error.h"
#include "engine/train/network.h"
#include "engine/train/network_file.h"

namespace crumb::train {
namespace {

// train's own rows: what it does around the run (no TrainConfig field), and --model-file, which the
// command line turns into --network.
Option own(const char* name, OptionType type, const char* metavar, const char* help) {
  Option o;
  o.name = name;
  o.type = type;
  o.metavar = metavar;
  o.help = help;
  o.bare = type == OptionType::Bool;
  o.resumable = true;  // a resumed run may explain itself, report or sweep like any run
  return o;
}

std::vector<Option> make_table() {
  Option model_file = own("model-file", OptionType::Path, "FILE", "--network, its description read from FILE");
  model_file.resumable = false;
  model_file.result = true;
  Option sweep = own("sweep", OptionType::IntList, "M1,M2,...",
                     "before training, time a few optimizer steps at each micro-batch size and measure the peak RSS; "
                     "the report plots them (sizes <= --batch, whole BatchNorm groups)");
  sweep.lo = 1;
  sweep.hi = 1 << 24;
  // Each of train's rows goes after the engine's row named first.
  const std::vector<std::pair<std::string, Option>> inserted = {
      {"model", model_file},
      {"deterministic",
       own("explain", OptionType::Bool, "",
           "print the memory plan (breakdown, chosen micro-batch, live bytes per step) and exit without training")},
      {"explain", own("explain-csv", OptionType::Path, "FILE", "--explain, and write the per-step timeline as CSV")},
      {"explain-csv",
       own("frontier", OptionType::Bool, "",
           "--explain, and list the memory-time frontier at the plan's micro-batch: from the least memory that fits "
           "to in memory, the step the cost model predicts at each point and how many saved values the plan there "
           "keeps, recomputes and swaps (--strategy swap or recompute: that technique alone)")},
      {"frontier",
       own("report", OptionType::Path, "FILE.html",
           "write the memory report: arena map (every tensor's address over its lifetime), memory timeline, batch "
           "sweep (memory against the micro-batch size) and their tables, in one self-contained HTML file; with "
           "--explain from the plan alone, after training with the measured figures too")},
      {"report", own("report-dir", OptionType::Path, "DIR",
                     "the same pictures as SVG files and the tables as CSV, in DIR (created)")},
      {"report-dir", sweep},
      {"dist-timeout", own("help", OptionType::Bool, "", "this text")},
  };
  std::vector<Option> table;
  std::function<void(const Option&)> push = [&](const Option& row) {
    table.push_back(row);
    for (const auto& [after, o] : inserted)
      if (after == row.name) push(o);
  };
  for (const Option& row : run_options()) push(row);
  return table;
}

// Words of `text` in lines of at most `width` characters, each after `indent` spaces but the first.
std::string wrapped(const std::string& text, std::size_t width, std::size_t indent) {
  std::string out, line;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

}  // namespace

const std::vector<Option>& flag_table() {
  static const std::vector<Option> table = make_table();
  return table;
}

Settings parse_flags(int argc, char** argv, std::string* model_file) {
  return parse_flags(std::vector<std::string>(argv + 1, argv + argc), model_file);
}

Settings parse_flags(const std::vector<std::string>& argv, std::string* model_file) {
  const std::vector<Option>& table = flag_table();
  Settings out;
  std::set<std::string> given;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    CRUMB_CHECK(arg.rfind("--", 0) == 0, "unexpected argument '", arg, "' (flags start with --; see --help)");
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Option* o = find_option(table, name);
    if (!o) {
      const std::vector<std::string> near = closest_names(table, name);
      CRUMB_FAIL("unknown flag --", name, near.empty() ? " (see --help)" : " (did you mean --" + near[0] + "?)");
    }
    CRUMB_CHECK(given.insert(name).second, "--", name, " is given twice");
    std::string value;
    if (o->bare) {
      CRUMB_CHECK(eq == std::string::npos, "--", name, " takes no value");
      value = "on";
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      CRUMB_CHECK(i + 1 < argv.size(), "--", name, " needs a value (see --help)");
      value = argv[++i];
    }
    // An empty value never means "the default": "--save=" would otherwise silently save nothing.
    CRUMB_CHECK(!value.empty(), "--", name, " needs a value, got an empty one (see --help)");
    // A network file goes into the record as its description, so a resumed run needs no file.
    if (name == "model-file" || name == "network")
      CRUMB_CHECK(!given.count("model-file") || !given.count("network"),
                  "--model-file and --network both give the network: give one of them");
    if (name == "model-file") {
      if (model_file) *model_file = value;
      value = network_json(parse_network(read_network_file(value), "--model-file " + value));
      o = find_option(table, "network");
    }
    out.push_back(setting(*o, value));
  }
  CRUMB_CHECK(!given.count("model") || !given.count("model-file"),
              "--model and --model-file both give the model: give one of them");
  return out;
}

bool wants_help(const Settings& given) {
  for (const Setting& s : given)
    if (s.name() == "help") return true;
  return false;
}

Options options_of(const Settings& given) {
  Options o;
  o.settings = resumed(flag_table(), given);
  o.config = configure(o.settings);
  for (const Setting& s : o.settings) {
    const std::string& name = s.name();
    if (name == "explain") o.explain = true;
    else if (name == "explain-csv") o.explain_csv = s.value, o.explain = true;
    else if (name == "frontier") o.frontier = o.explain = true;
    else if (name == "report") o.report = s.value;
    else if (name == "report-dir") o.report_dir = s.value;
    else if (name == "sweep")
      for (long long m : parse_value(*s.option, s.value).ints) o.sweep.push_back(static_cast<int>(m));
  }
  const TrainConfig& c = o.config;
  CRUMB_CHECK(c.epochs > 0 || !c.load.empty() || o.explain, "--epochs 0 evaluates a checkpoint: it needs --load");
  for (int m : o.sweep) CRUMB_CHECK(m <= c.batch, "--sweep: micro-batch ", m, " is larger than --batch ", c.batch);
  CRUMB_CHECK(o.sweep.empty() || !o.explain,
              "--sweep measures training steps: drop --explain (its --report shows the planned sweep)");
  return o;
}

std::string usage() {
  std::string out =
      "usage: train [flags]\n"
      "Trains a model on Fashion-MNIST with Crumb's graph executor and reports test accuracy per epoch.\n\n";
  constexpr std::size_t kColumn = 23, kWidth = 100;
  for (const Option& o : flag_table()) {
    std::string head = "  --" + o.name + (o.metavar.empty() ? "" : " " + o.metavar);
    head += head.size() < kColumn ? std::string(kColumn - head.size(), ' ') : "\n" + std::string(kColumn, ' ');
    const std::string def = o.default_text();
    out += head + wrapped(o.help + (def.empty() ? "" : " " + def), kWidth - kColumn, kColumn) + "\n";
  }
  return out + R"(
Data-parallel training: mpirun -np N train ... splits every batch over N processes
(docs/distributed.md).

No output (--save, --log, --report, --report-dir, --explain-csv) may be an input (--load, --resume,
the data files) or another output, by any name or link (--save may replace the --resume checkpoint);
outputs are regular files, never written through a symbolic link.

Flags are "--name value" or "--name=value", each at most once, never with an empty value; integers
are plain decimal digits. Progress goes to stderr (a bar on a terminal, plain lines otherwise); the
last stdout line is a JSON summary (a failed write to stdout is an error). The Python module takes
the same options as keyword arguments (micro_batch=8 is --micro-batch 8; docs/python.md).
)";
}

}  // namespace crumb::train
