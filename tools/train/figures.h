// The report's pictures, each a standalone SVG document (also inlined into the HTML report):
//  - the arena map: address against step, one rectangle per block, coloured by role;
//  - the memory timeline: live bytes per step against the lower bound, the arena and its budget;
//  - the batch sweep: total memory, stacked by part, against the micro-batch size (log2 axis);
//  - the measured throughput of the --sweep trials against the micro-batch size;
//  - the memory-time frontier (--frontier): predicted step time against memory, the budget's point marked.
// Elements a checker needs carry data-* attributes with exact byte counts (tests/report_check.py).
#pragma once
#include <string>

#include "tools/train/report_data.h"

namespace crumb::train {

std::string arena_map_svg(const ReportData& r);
std::string timeline_svg(const ReportData& r);
std::string sweep_svg(const ReportData& r);
std::string throughput_svg(const ReportData& r);  // needs r.trials
std::string frontier_svg(const ReportData& r);    // needs r.frontier

// The fill colour of a role or a memory part, shared by pictures and tables.
const char* role_colour(BlockRole role);
// The dtype a block's tensors are stored in ("BF16"); "bytes" for a step's workspace, which is raw scratch.
const char* block_dtype(const ArenaBlock& b);

// One part of the total memory as the sweep stacks it.
struct MemoryPart {
  const char* name;
  const char* colour;
  std::size_t (*bytes)(const MemoryBreakdown&);
  const char* note;  // what it holds, for hover text and tables
};
const std::vector<MemoryPart>& memory_parts();

}  // namespace crumb::train
