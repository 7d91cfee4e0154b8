#include "tools/train/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/graph/op.h"
#include "tools/train/chart.h"

namespace crumb::train {
namespace {

constexpr double kWidth = 1200;
constexpr const char* kBudgetColour = "#c62828";

std::string steps_text(int first, int last) {
  return first == last ? "step " + std::to_string(first)
                       : "steps [" + std::to_string(first) + ", " + std::to_string(last) + "]";
}

// The first backward step (the number of steps when there is none).
int first_backward(const ReportData& r) {
  const std::vector<NodeId>& order = r.plan.order;
  for (std::size_t s = 0; s < order.size(); ++s)
    if (r.graph->node(order[s]).backward) return static_cast<int>(s);
  return static_cast<int>(order.size());
}

// Tints the forward and backward steps' columns and names them over the frame.
void shade_passes(XmlWriter& w, const Frame& f, const Scale& x, const ReportData& r) {
  const int split = first_backward(r), steps = static_cast<int>(r.plan.order.size());
  const struct {
    int from, to;
    const char* name;
    const char* fill;
  } passes[] = {{0, split, "forward", "#eef4fb"}, {split, steps, "backward", "#fdf3e7"}};
  for (const auto& p : passes) {
    if (p.from == p.to) continue;
    w.leaf("rect", {{"x", x(p.from)}, {"y", f.top}, {"width", x(p.to) - x(p.from)}, {"height", f.height},
                    {"fill", p.fill}});
    // Above the frame: inside, blocks would hide it.
    w.leaf("text", {{"x", x(p.from) + 4}, {"y", f.top - 6}, {"fill", "#777"}, {"font-style", "italic"}}, p.name);
  }
}

// Byte ticks up to the top of a chart holding `top` bytes, and the chart's upper end.
std::vector<Tick> byte_axis(double top) { return labelled(byte_ticks(top * 1.04), byte_label); }

// A note over the top right of the frame, for a budget line that is off the top of the scale (inside,
// it would cross the arena line when the arena fills the scale).
void off_scale(XmlWriter& w, const Frame& f, const std::string& text) {
  w.leaf("text", {{"x", f.right()}, {"y", f.top - 6}, {"text-anchor", "end"}, {"fill", kBudgetColour}},
         text + " \u2191 (above the chart)");
}

// The micro-batch sizes on the sweep's axis (the sweep's and the trials'), and a log2 scale over them
// with half a step of margin on both sides.
// One slot per micro-batch size of the sweep or the trials.
Scale micro_batch_scale(const ReportData& r, const Frame& f) {
  Scale s{0, 1, f.left, f.right()};
  for (const MemoryBreakdown& mb : r.sweep) s.slots.push_back(mb.micro_batch);
  for (const Trial& t : r.trials) s.slots.push_back(t.micro_batch);
  std::sort(s.slots.begin(), s.slots.end());
  s.slots.erase(std::unique(s.slots.begin(), s.slots.end()), s.slots.end());
  return s;
}

std::vector<Tick> micro_batch_ticks(const ReportData& r) {
  return labelled(micro_batch_scale(r, Frame{}).slots, count_label);
}

// The frame's outline drawn over the plot, the x axis under it, and the finished SVG.
std::string finish_chart(XmlWriter& w, const Frame& f, const Scale& x, const std::vector<Tick>& ticks,
                         const std::string& title, const std::vector<double>& bold = {}) {
  w.leaf("rect", {{"x", f.left}, {"y", f.top}, {"width", f.width}, {"height", f.height}, {"fill", "none"},
                  {"stroke", "#555"}});
  x_axis(w, f, x, ticks, title, bold);
  w.close();
  return w.str();
}

// The arena map and the timeline share the step axis.
std::string finish_step_chart(XmlWriter& w, const Frame& f, const Scale& x, int steps) {
  return finish_chart(w, f, x, labelled(count_ticks(steps), count_label), "step (position in the executor's schedule)");
}

// The sweep and the throughput share the micro-batch axis, with the chosen m in bold.
std::string finish_micro_batch_chart(XmlWriter& w, const Frame& f, const Scale& x, const ReportData& r) {
  return finish_chart(w, f, x, micro_batch_ticks(r), "micro-batch size m (samples per forward + backward)",
                      {double(r.micro_batch())});
}

}  // namespace

const char* role_colour(BlockRole role) {
  switch (role) {
    case BlockRole::Activation: return "#a6cee3";
    case BlockRole::Saved: return "#1f78b4";
    case BlockRole::Gradient: return "#fdbf6f";
    case BlockRole::Workspace: return "#b8b8b8";
    case BlockRole::SwappedIn: return "#33a02c";
    case BlockRole::Recomputed: return "#cab2d6";
    case BlockRole::ParamGradient: return "#fb9a99";
  }
  return "#000000";
}

const char* block_dtype(const ArenaBlock& b) { return b.role == BlockRole::Workspace ? "bytes" : dtype_name(b.dtype); }

const std::vector<MemoryPart>& memory_parts() {
  static const std::vector<MemoryPart> parts = {
      {"parameters", "#4e79a7", [](const MemoryBreakdown& m) { return m.params; }, "the trained weights"},
      {"parameter copies", "#a0cbe8", [](const MemoryBreakdown& m) { return m.param_copies; },
       "mixed precision: the 16-bit copies of the weights that 16-bit ops read"},
      {"gradients", "#f28e2b", [](const MemoryBreakdown& m) { return m.grads; },
       "one copy, accumulated in place over micro-batches"},
      {"optimizer state", "#e15759", [](const MemoryBreakdown& m) { return m.optimizer_state; },
       "momentum, or AdamW's two moments"},
      {"non-trained state", "#76b7b2", [](const MemoryBreakdown& m) { return m.state; },
       "BatchNorm running statistics and counters"},
      {"arena: peak live values", "#59a14f", [](const MemoryBreakdown& m) { return m.activations; },
       "the most bytes of activations, saved tensors and gradients live at one step"},
      {"arena: workspace and packing", "#b6dba7", [](const MemoryBreakdown& m) { return m.arena - m.activations; },
       "the rest of the arena: kernel scratch, and gaps the packing could not fill"},
      {"input staging", "#edc948", [](const MemoryBreakdown& m) { return m.staging; },
       "two device slots of one micro-batch of inputs"},
      {"runtime", "#b07aa1", [](const MemoryBreakdown& m) { return m.runtime; }, "cuBLAS workspace"},
      {"loader buffers", "#9c755f", [](const MemoryBreakdown& m) { return m.loader; },
       "host: two training batches of B, two evaluation chunks of m"},
  };
  return parts;
}

std::string arena_map_svg(const ReportData& r) {
  const MemoryPlan& p = r.plan;
  const int steps = static_cast<int>(p.order.size());
  const double height = 640;
  const Frame f{110, 96, kWidth - 110 - 24, height - 96 - 60};
  XmlWriter w;
  open_svg(w, kWidth, height,
           {{"id", "arena-map"}, {"data-arena-bytes", std::to_string(p.arena_bytes)},
            {"data-steps", std::to_string(steps)},
            {"data-frame", AttrValue(f.left).text + " " + AttrValue(f.top).text + " " + AttrValue(f.width).text + " " +
                               AttrValue(f.height).text}});
  char ratio[16];
  std::snprintf(ratio, sizeof ratio, "%.3f", p.ratio());
  heading(w, "Arena map: " + r.title + ", micro-batch " + std::to_string(r.micro_batch()),
          "Every block of the training pass at its address (up) over its lifetime (across). Arena " +
              byte_label(p.arena_bytes) + " for a lower bound of " + byte_label(p.lower_bound) + " (ratio " +
              ratio + "). Hover a block for its tensors.");
  std::vector<LegendItem> items;
  for (BlockRole role : kBlockRoles) items.push_back({role_colour(role), role_name(role)});
  if (std::any_of(r.blocks.begin(), r.blocks.end(), [](const ArenaBlock& b) { return b.role == BlockRole::ParamGradient; }))
    items.push_back({role_colour(BlockRole::ParamGradient), role_name(BlockRole::ParamGradient)});
  items.push_back({"#222222", "lower bound " + byte_label(p.lower_bound), LegendItem::Kind::Line, "6 4"});
  legend(w, 16, 70, kWidth - 32, items);

  const Scale x{0, double(steps), f.left, f.right()};
  const Scale y{0, double(std::max<std::size_t>(p.arena_bytes, 1)), f.bottom(), f.top};
  shade_passes(w, f, x, r);
  y_axis(w, f, y, byte_axis(p.arena_bytes), "address in the arena (offset)");
  // Under the blocks, showing through the gaps, and past the frame's right edge where blocks cover it.
  const double lb = y(double(p.lower_bound));
  w.leaf("line", {{"x1", f.left}, {"x2", f.right() + 14}, {"y1", lb}, {"y2", lb}, {"stroke", "#222222"},
                  {"stroke-width", 2}, {"stroke-dasharray", "6 4"}});
  for (const ArenaBlock& b : r.blocks) {
    const double x0 = x(b.first), x1 = x(b.last + 1), y0 = y(double(b.offset + b.bytes)), y1 = y(double(b.offset));
    Attrs a = {{"class", "block"},
               {"x", x0},
               {"y", y0},
               {"width", x1 - x0},
               {"height", y1 - y0},
               {"fill", role_colour(b.role)},
               {"data-offset", std::to_string(b.offset)},
               {"data-bytes", std::to_string(b.bytes)},
               {"data-first", std::to_string(b.first)},
               {"data-last", std::to_string(b.last)},
               {"data-role", role_name(b.role)},
               {"data-dtype", block_dtype(b)}};
    // A white edge separates neighbours, where a block is wide enough to keep its colour.
    if (x1 - x0 > 4 && y1 - y0 > 4) a.insert(a.end(), {{"stroke", "#ffffff"}, {"stroke-width", 0.75}});
    w.titled("rect", a,
             b.layer + " (" + b.op + ") \u2014 " + role_name(b.role) +
                 (b.role == BlockRole::Workspace ? "" : std::string(", ") + block_dtype(b)) + "\n" + b.values + "\n" +
                 format_bytes(b.bytes) + " (" + std::to_string(b.bytes) + " bytes) at offset " +
                 std::to_string(b.offset) + "\n" + steps_text(b.first, b.last) + ": " +
                 r.graph->node(p.order[b.first]).name + " \u2192 " + r.graph->node(p.order[b.last]).name);
    // The longest label that fits: layer, op and role; layer and role; the layer alone.
    std::string label;
    for (const std::string& candidate : {b.layer + " " + b.op + " \u00b7 " + role_name(b.role),
                                         b.layer + " \u00b7 " + role_name(b.role), b.layer})
      if (label.empty() && text_width(candidate, 11) + 6 < x1 - x0) label = candidate;
    if (!label.empty() && y1 - y0 >= 14)
      w.leaf("text", {{"x", (x0 + x1) / 2}, {"y", (y0 + y1) / 2 + 4}, {"text-anchor", "middle"}, {"font-size", 11},
                      {"fill", b.role == BlockRole::Saved ? "#ffffff" : "#222222"}, {"pointer-events", "none"}},
             label);
  }
  return finish_step_chart(w, f, x, steps);
}

std::string timeline_svg(const ReportData& r) {
  const MemoryPlan& p = r.plan;
  const int steps = static_cast<int>(p.order.size());
  const double height = 420;
  const Frame f{110, 96, kWidth - 110 - 24, height - 96 - 60};
  // The arena's share of the budget: what is left after everything outside the arena.
  const std::size_t outside = r.memory.total() - r.memory.arena;
  const std::size_t arena_budget = r.budget > outside ? r.budget - outside : 0;
  const bool budget_on_scale = arena_budget <= 1.6 * p.arena_bytes;
  const std::vector<Tick> ticks = byte_axis(double(budget_on_scale ? std::max(arena_budget, p.arena_bytes) : p.arena_bytes));
  const Scale x{0, double(steps), f.left, f.right()}, y{0, ticks.back().value, f.bottom(), f.top};

  XmlWriter w;
  open_svg(w, kWidth, height, {{"id", "timeline"}, {"data-lower-bound", std::to_string(p.lower_bound)},
                               {"data-arena-bytes", std::to_string(p.arena_bytes)}});
  const std::size_t peak_step =
      std::max_element(p.live_bytes.begin(), p.live_bytes.end()) - p.live_bytes.begin();
  heading(w, "Memory timeline: " + r.title + ", micro-batch " + std::to_string(r.micro_batch()),
          "Bytes live in the arena at each step of the training pass. Peak of values at step " +
              std::to_string(peak_step) + " (" + r.graph->node(p.order[peak_step]).name + "). Hover a step for its numbers.");
  legend(w, 16, 70, kWidth - 32,
         {{"#59a14f", "live values"},
          {"#b8b8b8", "step workspace"},
          {"#222222", "lower bound " + byte_label(p.lower_bound), LegendItem::Kind::Line, "6 4"},
          {"#1f78b4", "arena " + byte_label(p.arena_bytes), LegendItem::Kind::Line, ""},
          {kBudgetColour, "budget left for the arena " + byte_label(arena_budget), LegendItem::Kind::Line, "2 3"}});
  shade_passes(w, f, x, r);
  y_axis(w, f, y, ticks, "bytes live in the arena");
  // Step functions: values at the bottom, each step's workspace stacked on them.
  std::string values = "M" + AttrValue(x(0)).text + " " + AttrValue(y(0)).text, total = values;
  for (int s = 0; s < steps; ++s) {
    const std::string xs = AttrValue(x(s)).text + " ", xe = AttrValue(x(s + 1)).text + " ";
    const std::string yl = AttrValue(y(double(p.live_bytes[s]))).text;
    const std::string yt = AttrValue(y(double(p.live_bytes[s] + p.step_workspace[s]))).text;
    values += " L" + xs + yl + " L" + xe + yl;
    total += " L" + xs + yt + " L" + xe + yt;
  }
  const std::string close = " L" + AttrValue(x(steps)).text + " " + AttrValue(y(0)).text + " Z";
  w.leaf("path", {{"d", total + close}, {"fill", "#b8b8b8"}});
  w.leaf("path", {{"d", values + close}, {"fill", "#59a14f"}, {"fill-opacity", 0.9}});
  reference_line(w, f, y(double(p.lower_bound)), "#222222", "6 4");
  reference_line(w, f, y(double(p.arena_bytes)), "#1f78b4", "none");
  if (budget_on_scale) reference_line(w, f, y(double(arena_budget)), kBudgetColour, "2 3");
  else off_scale(w, f, "budget left for the arena: " + byte_label(arena_budget));
  for (int s = 0; s < steps; ++s) {
    const Node& n = r.graph->node(p.order[s]);
    w.titled("rect",
             {{"class", "step"}, {"x", x(s)}, {"y", f.top}, {"width", x(s + 1) - x(s)}, {"height", f.height},
              {"fill", "#000000"}, {"fill-opacity", 0}, {"data-live", std::to_string(p.live_bytes[s])},
              {"data-workspace", std::to_string(p.step_workspace[s])}},
             "step " + std::to_string(s) + " (" + (n.backward ? "backward" : "forward") + "): " + n.name + " [" +
                 n.def->name + "] writes " + output_dtypes(*r.graph, n) + "\nlive values " +
                 format_bytes(p.live_bytes[s]) + ", workspace " + format_bytes(p.step_workspace[s]));
  }
  return finish_step_chart(w, f, x, steps);
}

std::string sweep_svg(const ReportData& r) {
  const double height = 480;
  const Frame f{110, 96, kWidth - 110 - 24, height - 96 - 60};
  std::size_t top = 0;
  for (const MemoryBreakdown& mb : r.sweep) top = std::max(top, mb.total());
  for (const Trial& t : r.trials) top = std::max(top, t.rss_bytes);
  const bool budget_on_scale = r.budget <= 1.6 * top;
  const std::vector<Tick> ticks = byte_axis(double(budget_on_scale ? std::max(top, r.budget) : top));
  const Scale x = micro_batch_scale(r, f), y{0, ticks.back().value, f.bottom(), f.top};

  // Parts that are zero at every size (staging on the CPU) stay out of the picture and its legend.
  std::vector<const MemoryPart*> parts;
  for (const MemoryPart& part : memory_parts())
    for (const MemoryBreakdown& mb : r.sweep)
      if (part.bytes(mb)) {
        parts.push_back(&part);
        break;
      }
  XmlWriter w;
  open_svg(w, kWidth, height, {{"id", "sweep"}, {"data-budget", std::to_string(r.budget)},
                               {"data-chosen", std::to_string(r.micro_batch())}});
  heading(w, "Batch sweep: " + r.title + ", batch " + std::to_string(r.batch),
          "Total memory of a run against its micro-batch size m (one slot per size; the plan of each m, compiled). Chosen: m = " +
              std::to_string(r.micro_batch()) + ". Hover a bar for its parts.");
  std::vector<LegendItem> items;
  for (const MemoryPart* part : parts) items.push_back({part->colour, part->name});
  items.push_back({kBudgetColour, "budget " + byte_label(r.budget), LegendItem::Kind::Line, "6 4"});
  if (!r.trials.empty()) items.push_back({"#222222", "measured RSS growth (--sweep)", LegendItem::Kind::Marker});
  legend(w, 16, 66, kWidth - 32, items);
  y_axis(w, f, y, ticks, "memory");

  double spacing = f.width;
  for (std::size_t i = 1; i < r.sweep.size(); ++i)
    spacing = std::min(spacing, x(r.sweep[i].micro_batch) - x(r.sweep[i - 1].micro_batch));
  const double bar = std::min(48.0, 0.6 * spacing);
  for (const MemoryBreakdown& mb : r.sweep) {
    const double cx = x(mb.micro_batch);
    double base = 0;
    w.open("g", {{"class", "bar"}, {"data-micro-batch", std::to_string(mb.micro_batch)},
                 {"data-total", std::to_string(mb.total())}});
    for (const MemoryPart* part : parts) {
      const std::size_t bytes = part->bytes(mb);
      if (!bytes) continue;
      w.titled("rect",
               {{"x", cx - bar / 2}, {"y", y(base + bytes)}, {"width", bar}, {"height", y(base) - y(base + bytes)},
                {"fill", part->colour}, {"data-part", part->name}, {"data-bytes", std::to_string(bytes)}},
               "m = " + std::to_string(mb.micro_batch) + ": " + part->name + " " + format_bytes(bytes) + " (" +
                   part->note + ")\ntotal " + format_bytes(mb.total()));
      base += double(bytes);
    }
    w.close();
    if (mb.micro_batch == r.micro_batch()) {
      w.leaf("rect", {{"x", cx - bar / 2 - 2}, {"y", y(base) - 2}, {"width", bar + 4}, {"height", y(0) - y(base) + 2},
                      {"fill", "none"}, {"stroke", "#222"}, {"stroke-width", 2}});
      w.leaf("text", {{"x", cx}, {"y", y(base) - 8}, {"text-anchor", "middle"}, {"font-weight", "bold"}}, "chosen");
    }
  }
  if (budget_on_scale) reference_line(w, f, y(double(r.budget)), kBudgetColour, "6 4");
  else off_scale(w, f, "budget " + byte_label(r.budget));
  for (const Trial& t : r.trials)
    w.titled("path", {{"d", diamond(x(t.micro_batch), y(double(t.rss_bytes)), 7)}, {"fill", "#222222"},
                      {"stroke", "#ffffff"}},
             "m = " + std::to_string(t.micro_batch) + ": resident memory grew by " + format_bytes(t.rss_bytes));
  return finish_micro_batch_chart(w, f, x, r);
}

std::string throughput_svg(const ReportData& r) {
  const double height = 360;
  const Frame f{110, 70, kWidth - 110 - 24, height - 70 - 60};
  double top = 0;
  for (const Trial& t : r.trials) top = std::max(top, t.samples_per_s);
  const std::vector<Tick> ticks = labelled(count_ticks(top * 1.15), count_label);
  const Scale x = micro_batch_scale(r, f), y{0, ticks.back().value, f.bottom(), f.top};
  XmlWriter w;
  open_svg(w, kWidth, height, {{"id", "throughput"}});
  heading(w, "Measured throughput: " + r.title + ", batch " + std::to_string(r.batch),
          "Training samples per second of short trials (--sweep), each " + std::to_string(r.trials.front().steps) +
              " timed optimizer steps after a warm-up step, against the micro-batch size m.");
  y_axis(w, f, y, ticks, "samples / s");
  std::string line;
  for (const Trial& t : r.trials)
    line += (line.empty() ? "M" : " L") + AttrValue(x(t.micro_batch)).text + " " + AttrValue(y(t.samples_per_s)).text;
  w.leaf("path", {{"d", line}, {"fill", "none"}, {"stroke", "#4e79a7"}, {"stroke-width", 2}});
  for (const Trial& t : r.trials) {
    const double px = x(t.micro_batch), py = y(t.samples_per_s);
    w.titled("circle", {{"cx", px}, {"cy", py}, {"r", 5}, {"fill", "#4e79a7"}},
             "m = " + std::to_string(t.micro_batch) + ": " + count_label(t.samples_per_s) + " samples/s, " +
                 std::to_string(std::lround(t.step_seconds * 1e3)) + " ms per step");
    w.leaf("text", {{"x", px}, {"y", py - 10}, {"text-anchor", "middle"}}, count_label(t.samples_per_s));
  }
  return finish_micro_batch_chart(w, f, x, r);
}


std::string frontier_svg(const ReportData& r) {
  const Frontier& fr = *r.frontier;
  const FrontierPoint& full = fr.points.back();
  const double height = 420;
  const Frame f{110, 84, kWidth - 110 - 24, height - 84 - 60};
  const bool budget_on_scale = r.budget <= 1.6 * double(full.total);
  const std::vector<Tick> xticks = byte_axis(double(budget_on_scale ? std::max(full.total, r.budget) : full.total));
  double slowest = 0;
  for (const FrontierPoint& p : fr.points) slowest = std::max(slowest, p.predicted_seconds * 1e3);
  const std::vector<Tick> yticks =
      labelled(count_ticks(slowest * 1.15), [](double ms) { return count_label(ms) + " ms"; });
  const Scale x{0, xticks.back().value, f.left, f.right()}, y{0, yticks.back().value, f.bottom(), f.top};
  const int marked = budget_point(fr, r.budget);
  auto text = [](double v, const char* format) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };

  XmlWriter w;
  open_svg(w, kWidth, height,
           {{"id", "frontier"}, {"data-budget", std::to_string(r.budget)}, {"data-points", int(fr.points.size())},
            {"data-marked", marked}, {"data-x-max", text(x.d1, "%.17g")}, {"data-y-max-ms", text(y.d1, "%.17g")},
            {"data-frame", AttrValue(f.left).text + " " + AttrValue(f.top).text + " " + AttrValue(f.width).text + " " +
                               AttrValue(f.height).text}});
  heading(w, "Memory-time frontier: " + r.title + ", micro-batch " + std::to_string(fr.micro_batch),
          "Predicted step time of the plan --strategy " + std::string(strategy_name(fr.strategy)) +
              " makes at each memory (kernel times measured at " + std::to_string(fr.costs.measured_batch) +
              " samples). A budget between two points gets the left one's time.");
  std::vector<LegendItem> items = {{"#4e79a7", "plans on the frontier", LegendItem::Kind::Line, ""},
                                   {"#222222", "the budget's point (the fastest that fits)", LegendItem::Kind::Marker},
                                   {kBudgetColour, "budget " + byte_label(r.budget), LegendItem::Kind::Line, "6 4"}};
  legend(w, 16, 66, kWidth - 32, items);
  y_axis(w, f, y, yticks, "predicted step time");
  // No plan fits left of the least.
  const double least = x(double(fr.points.front().total));
  w.leaf("rect", {{"x", f.left}, {"y", f.top}, {"width", least - f.left}, {"height", f.height}, {"fill", "#f1f1f1"}});
  if (least - f.left > text_width("no plan fits", 12) + 12)
    w.leaf("text", {{"x", f.left + 8}, {"y", f.top + 18}, {"fill", "#777"}, {"font-style", "italic"}}, "no plan fits");
  // The time a budget gets: a step down at each point.
  std::string stairs;
  for (const FrontierPoint& p : fr.points) {
    const std::string px = AttrValue(x(double(p.total))).text, py = AttrValue(y(p.predicted_seconds * 1e3)).text;
    stairs += stairs.empty() ? "M" + px + " " + py : " H" + px + " V" + py;
  }
  w.leaf("path", {{"d", stairs}, {"fill", "none"}, {"stroke", "#4e79a7"}, {"stroke-width", 2}});
  for (std::size_t i = 0; i < fr.points.size(); ++i) {
    const FrontierPoint& p = fr.points[i];
    const double px = x(double(p.total)), py = y(p.predicted_seconds * 1e3);
    const std::string hover =
        byte_label(double(p.total)) + " (" + text(double(p.total) / double(full.total), "%.3f") + "x): " +
        text(p.predicted_seconds * 1e3, "%.2f") + " ms (" + text(p.predicted_seconds / full.predicted_seconds, "%.3f") +
        "x), " + p.used + "\nsaved values kept " + std::to_string(p.kept) + " (" + format_bytes(p.kept_bytes) +
        "), recomputed " + std::to_string(p.recomputed) + " (" + format_bytes(p.recomputed_bytes) +
        (p.twice ? ", " + std::to_string(p.twice) + " twice" : "") + "), swapped " +
        std::to_string(p.swapped) + " (" + format_bytes(p.swapped_bytes) + "); steps lean " + std::to_string(p.lean) +
        (p.graph.empty() ? "" : "; the " + p.graph + " graph");
    w.titled("circle",
             {{"class", "point"}, {"cx", px}, {"cy", py}, {"r", 5}, {"fill", "#4e79a7"},
              {"data-total", std::to_string(p.total)}, {"data-seconds", text(p.predicted_seconds, "%.17g")},
              {"data-plan", p.used}},
             hover);
    if (int(i) == marked) {
      w.leaf("path", {{"d", diamond(px, py, 10)}, {"fill", "none"}, {"stroke", "#222"}, {"stroke-width", 2}});
      w.leaf("text", {{"x", px + 12}, {"y", py - 12}, {"font-weight", "bold"}}, "the budget's");
    }
  }
  if (budget_on_scale) {
    const double bx = x(double(r.budget));
    w.leaf("line", {{"x1", bx}, {"x2", bx}, {"y1", f.top}, {"y2", f.bottom()}, {"stroke", kBudgetColour},
                    {"stroke-width", 2}, {"stroke-dasharray", "6 4"}, {"class", "budget"}});
  } else {
    w.leaf("text", {{"x", f.right()}, {"y", f.top - 6}, {"text-anchor", "end"}, {"fill", kBudgetColour}},
           "budget " + byte_label(r.budget) + " \u2192 (right of the chart)");
  }
  return finish_chart(w, f, x, xticks, "memory (the least budget the plan fits in)");
}

}  // namespace crumb::train
