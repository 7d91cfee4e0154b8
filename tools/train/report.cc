#include "tools/train/report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/ops/norm.h"
#include "tools/train/chart.h"
#include "tools/train/figures.h"
#include "tools/train/svg.h"

namespace crumb::train {
namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

Table breakdown_table(const ReportData& r) {
  Table t{"breakdown",
          std::string("Memory of the chosen micro-batch size (the numbers of --explain), precision ") +
              precision_of(*r.graph),
          {"part", "bytes", "size", "dtype", "holds"},
          {}};
  for (const BreakdownRow& row : breakdown_rows(r.memory, r.budget))
    t.rows.push_back({row.label, std::to_string(row.bytes), format_bytes(row.bytes), row.dtype, row.note});
  const MemoryPlan& p = r.plan;
  t.rows.push_back({"arena plan (training)", std::to_string(p.arena_bytes), format_bytes(p.arena_bytes), "", ""});
  t.rows.push_back({"lower bound (training)", std::to_string(p.lower_bound), format_bytes(p.lower_bound), "",
                    "max over steps of live + workspace bytes"});
  t.rows.push_back({"ratio", fixed(p.ratio(), 3), fixed(p.ratio(), 3), "", "arena plan / lower bound"});
  return t;
}

Table measured_table(const ReportData& r) {
  const Measured& m = *r.measured;
  Table t{"measured", "Measured by the training run", {"figure", "value", "shown", "compare with"}, {}};
  const double step = m.steps ? m.train_seconds / double(m.steps) : 0.0;
  t.rows = {{"optimizer steps", std::to_string(m.steps), count_label(double(m.steps)), ""},
            {"training time (s)", fixed(m.train_seconds, 3), fixed(m.train_seconds, 2) + " s", ""},
            {"step time (s)", fixed(step, 6), fixed(step * 1e3, 1) + " ms", "a batch of " + std::to_string(r.batch)},
            {"throughput (samples/s)", fixed(m.samples_per_s, 1), count_label(m.samples_per_s), ""},
            {"RSS growth while training (bytes)", std::to_string(m.rss_bytes), format_bytes(m.rss_bytes),
             "planned total " + format_bytes(r.memory.total())},
            {"peak RSS of the process (bytes)", std::to_string(m.max_rss_bytes), format_bytes(m.max_rss_bytes),
             "also holds the program, the dataset and the --sweep trials"},
            {"test accuracy", fixed(m.test_accuracy, 4), fixed(m.test_accuracy, 4), ""}};
  return t;
}

Table blocks_table(const ReportData& r) {
  Table t{"blocks", "Arena blocks (one row per rectangle of the arena map)",
          {"first_step", "last_step", "offset", "bytes", "size", "role", "dtype", "layer", "values"}, {}};
  for (const ArenaBlock& b : r.blocks)
    t.rows.push_back({std::to_string(b.first), std::to_string(b.last), std::to_string(b.offset), std::to_string(b.bytes),
                      format_bytes(b.bytes), role_name(b.role), block_dtype(b), b.layer, b.values});
  return t;
}

Table timeline_table(const ReportData& r) {
  Table t{"timeline", "Bytes live at each step (the memory timeline)",
          {"step", "pass", "layer", "op", "dtype", "live_bytes", "workspace_bytes", "live + workspace"}, {}};
  const MemoryPlan& p = r.plan;
  for (std::size_t s = 0; s < p.order.size(); ++s) {
    const Node& n = r.graph->node(p.order[s]);
    t.rows.push_back({std::to_string(s), n.backward ? "backward" : "forward", n.name, n.def->name,
                      output_dtypes(*r.graph, n), std::to_string(p.live_bytes[s]), std::to_string(p.step_workspace[s]),
                      format_bytes(p.live_bytes[s] + p.step_workspace[s])});
  }
  return t;
}

Table sweep_table(const ReportData& r) {
  Table t{"sweep", "Memory against the micro-batch size (the batch sweep), in bytes", {"micro_batch"}, {}};
  for (const MemoryPart& part : memory_parts()) t.header.push_back(part.name);
  t.header.insert(t.header.end(), {"total", "size", "fits the budget"});
  for (const MemoryBreakdown& mb : r.sweep) {
    std::vector<std::string> row = {std::to_string(mb.micro_batch)};
    for (const MemoryPart& part : memory_parts()) row.push_back(std::to_string(part.bytes(mb)));
    row.insert(row.end(), {std::to_string(mb.total()), format_bytes(mb.total()),
                           mb.micro_batch == r.micro_batch() ? "chosen" : mb.total() <= r.budget ? "yes" : "no"});
    t.rows.push_back(row);
  }
  return t;
}

Table trials_table(const ReportData& r) {
  Table t{"trials", "Measured trials (--sweep)",
          {"micro_batch", "timed_steps", "step_seconds", "samples_per_s", "rss_growth_bytes", "RSS growth", "planned total"},
          {}};
  for (const Trial& trial : r.trials) {
    const auto planned = std::find_if(r.sweep.begin(), r.sweep.end(),
                                      [&](const MemoryBreakdown& mb) { return mb.micro_batch == trial.micro_batch; });
    t.rows.push_back({std::to_string(trial.micro_batch), std::to_string(trial.steps), fixed(trial.step_seconds, 6),
                      fixed(trial.samples_per_s, 1), std::to_string(trial.rss_bytes), format_bytes(trial.rss_bytes),
                      format_bytes(planned->total())});
  }
  return t;
}

bool has_frontier(const ReportData& r) { return r.frontier && !r.frontier->points.empty(); }

// The frontier's points as --explain --frontier lists them, with exact bytes and seconds beside.
Table frontier_table(const ReportData& r) {
  const Frontier& f = *r.frontier;
  Table t{"frontier",
          "Memory-time frontier at micro-batch " + std::to_string(f.micro_batch) + " (--explain --frontier)",
          {"memory_bytes", "memory", "memory_x", "step_seconds", "step", "step_x", "plan", "kept", "recomputed",
           "recomputed_twice", "swapped", "steps_lean", "graph", "budget's"},
          {}};
  const FrontierPoint& full = f.points.back();
  const int marked = budget_point(f, r.budget);
  for (std::size_t i = 0; i < f.points.size(); ++i) {
    const FrontierPoint& p = f.points[i];
    auto values = [](int n, std::size_t bytes) { return std::to_string(n) + " (" + format_bytes(bytes) + ")"; };
    t.rows.push_back({std::to_string(p.total), format_bytes(p.total), fixed(double(p.total) / double(full.total), 3),
                      fixed(p.predicted_seconds, 9), fixed(p.predicted_seconds * 1e3, 2) + " ms",
                      fixed(full.predicted_seconds > 0 ? p.predicted_seconds / full.predicted_seconds : 0.0, 3), p.used,
                      values(p.kept, p.kept_bytes), values(p.recomputed, p.recomputed_bytes), std::to_string(p.twice),
                      values(p.swapped, p.swapped_bytes), std::to_string(p.lean), p.graph, int(i) == marked ? "yes" : ""});
  }
  return t;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv(const Table& t) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + csv_field(cells[i]);
    out += "\n";
  };
  line(t.header);
  for (const auto& row : t.rows) line(row);
  return out;
}

// Long tables (a block per row) stay folded under their picture.
void html_table(XmlWriter& w, const Table& t, bool folded) {
  if (folded) w.open("details").leaf("summary", {}, t.caption + " \u2014 " + std::to_string(t.rows.size()) + " rows");
  w.open("table", {{"id", t.id}});
  if (!folded) w.leaf("caption", {}, t.caption);
  w.open("thead").open("tr");
  // The first column (the row labels) is aligned left inline, so a page's own style (a notebook right-aligns
  // table cells) keeps the labels readable.
  for (std::size_t i = 0; i < t.header.size(); ++i)
    w.leaf("th", i ? Attrs{} : Attrs{{"style", "text-align: left"}}, t.header[i]);
  w.close().close().open("tbody");
  for (const auto& row : t.rows) {
    w.open("tr");
    for (std::size_t i = 0; i < row.size(); ++i) {
      // A label indented by spaces (a part of the row above, as --explain prints it) keeps its indent,
      // which HTML would collapse.
      const std::string& cell = row[i];
      const std::size_t indent = std::min(cell.find_first_not_of(' '), cell.size());
      if (i > 0)
        w.leaf("td", {}, cell);
      else if (indent == 0)
        w.leaf("td", {{"style", "text-align: left"}}, cell);
      else
        w.leaf("td", {{"class", "part"}, {"style", "text-align: left; padding-left: " + std::to_string(indent + 1) + "ch"}},
               cell.substr(indent));
    }
    w.close();
  }
  w.close().close();
  if (folded) w.close();
}

// No '<' or '&' inside: the style element is parsed as XML too.
constexpr const char* kStyle = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; color: #222; background: #fff;
       max-width: 1240px; margin: 24px auto; padding: 0 16px; line-height: 1.45; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 19px; margin-top: 36px; border-bottom: 1px solid #ddd; }
p.sub { color: #555; margin-top: 0; }
svg { display: block; margin: 12px 0; border: 1px solid #e4e4e4; max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
caption { text-align: left; font-weight: bold; padding: 4px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
tbody tr:nth-child(even) { background: #fafafa; }
details { margin: 8px 0 16px; } summary { cursor: pointer; color: #1f5fa8; }
code { background: #f4f4f4; padding: 1px 4px; }
)";

// A titled section: what the picture shows, the picture, and the table of numbers behind it.
void section(XmlWriter& w, const std::string& title, const std::string& text, const std::string& svg, const Table& t,
             bool folded) {
  w.leaf("h2", {}, title).leaf("p", {}, text);
  w.raw(svg);
  html_table(w, t, folded);
}

// The report's content, inside the element the caller has open.
void report_body(XmlWriter& w, const ReportData& r) {
  w.leaf("h1", {}, "Memory report: " + r.title);
  w.leaf("p", {{"class", "sub"}},
         r.subtitle + (r.measured ? ". Planned and measured (a training run)." : ". From the plan alone (--explain)."));
  html_table(w, breakdown_table(r), false);
  if (r.measured) html_table(w, measured_table(r), false);

  section(w, "Arena map",
          "Address in the arena (up) against the step of the training pass (across): every activation, tensor saved "
          "for the backward pass, activation gradient and kernel workspace is a rectangle from the step that "
          "produces it to the last step that reads it. Blocks never overlap while both are live; the planner "
          "packs them so the arena stays close to the lower bound.",
          arena_map_svg(r), blocks_table(r), true);

  section(w, "Memory timeline",
          "Bytes live in the arena at each step. Forward steps grow the saved tensors; the backward pass frees them "
          "as their gradients are computed. The highest point (live values plus that step's workspace) is the lower "
          "bound no placement can beat.",
          timeline_svg(r), timeline_table(r), true);

  section(w, "Batch sweep",
          "Total memory of the run against the micro-batch size m: the persistent parts do not depend on m, the "
          "arena grows about linearly with it. The budget decides the largest m that fits; the batch is then "
          "trained as micro-batches of m with the same gradients.",
          sweep_svg(r), sweep_table(r), false);
  if (!r.trials.empty()) {
    w.raw(throughput_svg(r));
    html_table(w, trials_table(r), false);
  }
  if (has_frontier(r)) {
    section(w, "Memory-time frontier",
            "What less memory costs in time at this micro-batch: for budgets from the least that fits to the "
            "in-memory total, the plan the strategy makes (saved values kept, swapped to the host or recomputed in "
            "the backward pass; weight gradients run lean) and its predicted step time. Each point is faster than "
            "every one to its left; the budget takes the rightmost point it fits.",
            frontier_svg(r), frontier_table(r), false);
  }
}

// The files of --report-dir; one whose text is empty (no trials, nothing measured) is not written.
struct DirFile {
  const char* name;
  std::string (*text)(const ReportData&);
};
const DirFile kDirFiles[] = {
    {"arena_map.svg", arena_map_svg},
    {"timeline.svg", timeline_svg},
    {"sweep.svg", sweep_svg},
    {"breakdown.csv", [](const ReportData& r) { return csv(breakdown_table(r)); }},
    {"blocks.csv", [](const ReportData& r) { return csv(blocks_table(r)); }},
    {"timeline.csv", [](const ReportData& r) { return csv(timeline_table(r)); }},
    {"sweep.csv", [](const ReportData& r) { return csv(sweep_table(r)); }},
    {"throughput.svg", [](const ReportData& r) { return r.trials.empty() ? std::string() : throughput_svg(r); }},
    {"trials.csv", [](const ReportData& r) { return r.trials.empty() ? std::string() : csv(trials_table(r)); }},
    {"measured.csv", [](const ReportData& r) { return r.measured ? csv(measured_table(r)) : std::string(); }},
    {"frontier.svg", [](const ReportData& r) { return has_frontier(r) ? frontier_svg(r) : std::string(); }},
    {"frontier.csv", [](const ReportData& r) { return has_frontier(r) ? csv(frontier_table(r)) : std::string(); }},
};

}  // namespace

std::vector<Table> report_tables(const ReportData& r) {
  std::vector<Table> tables = {breakdown_table(r), blocks_table(r), timeline_table(r), sweep_table(r)};
  if (!r.trials.empty()) tables.push_back(trials_table(r));
  if (r.measured) tables.push_back(measured_table(r));
  if (has_frontier(r)) tables.push_back(frontier_table(r));
  return tables;
}

std::string report_html(const ReportData& r, bool fragment) {
  XmlWriter w;
  if (fragment) {
    w.open("div", {{"class", "crumb-report"}});
    report_body(w, r);
    w.close();
    return w.str();
  }
  w.raw("<!DOCTYPE html>\n");
  w.open("html", {{"xmlns", "http://www.w3.org/1999/xhtml"}, {"lang", "en"}}).open("head");
  w.leaf("meta", {{"charset", "utf-8"}}).leaf("title", {}, "Crumb memory report: " + r.title);
  w.open("style").text(kStyle).close().close().open("body");
  report_body(w, r);
  w.close().close();
  return w.str();
}

ReportData collect_report(const Graph& g, const MicroBatchPlan& chosen, int batch, std::size_t budget,
                          const OptimizerConfig& opt, Device device, const std::vector<int>& extra) {
  ReportData r;
  r.graph = &g;
  r.batch = batch;
  r.budget = budget;
  r.memory = chosen.memory;
  r.plan = chosen.train.plan;
  r.blocks = arena_blocks(g, r.plan, chosen.micro_batch);
  std::vector<int> sizes = extra;
  const int q = micro_batch_multiple(g);
  for (long long m = q; q > 0 && m < batch; m *= 2) sizes.push_back(static_cast<int>(m));
  sizes.insert(sizes.end(), {batch, chosen.micro_batch});
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int m : sizes)
    r.sweep.push_back(m == chosen.micro_batch ? chosen.memory : measure_memory(g, m, opt, device, 0, batch));
  return r;
}

std::vector<FileUse> report_outputs(const std::string& html_path, const std::string& dir) {
  std::vector<FileUse> uses;
  if (!html_path.empty()) uses.push_back({"--report", html_path, true, ""});
  if (!dir.empty())
    for (const DirFile& f : kDirFiles)
      uses.push_back({"--report-dir", (std::filesystem::path(dir) / f.name).string(), true, ""});
  return uses;
}

ReportOutput::ReportOutput(const std::string& html_path, const std::string& dir) : html_path_(html_path), dir_(dir) {
  if (!html_path_.empty()) {
    // Written whole at the end, through a temporary file beside it: its folder must take new files.
    const std::string folder = std::filesystem::path(html_path_).parent_path().string();
    CRUMB_CHECK(::access(folder.empty() ? "." : folder.c_str(), W_OK | X_OK) == 0, "--report: cannot write ",
                html_path_, ": ", std::strerror(errno));
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    CRUMB_CHECK(!ec && std::filesystem::is_directory(dir_), "--report-dir: cannot create folder ", dir_, ": ",
                ec ? ec.message() : "a file of that name exists");
    CRUMB_CHECK(::access(dir_.c_str(), W_OK | X_OK) == 0, "--report-dir: cannot write into ", dir_, ": ",
                std::strerror(errno));
  }
}

void ReportOutput::write(const ReportData& r) {
  if (!html_path_.empty()) write_file_atomically(html_path_, {report_html(r)}, "--report");
  if (dir_.empty()) return;
  for (const DirFile& f : kDirFiles) {
    const std::string text = f.text(r);
    if (!text.empty())
      write_file_atomically((std::filesystem::path(dir_) / f.name).string(), {text}, "--report-dir file");
  }
}

}  // namespace crumb::train
