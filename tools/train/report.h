// `train --report FILE.html` and `--report-dir DIR`: the memory plan as pictures (tools/train/figures.h)
// with the tables of numbers behind them. The HTML file is self-contained (inline SVG and CSS, no
// script, no network) and well-formed XML, so it opens from disk and parses with any XML parser; the
// folder holds each picture as an SVG file and each table as CSV.
#pragma once
#include <string>
#include <vector>

#include "engine/io/output_file.h"
#include "engine/strategy/memory_report.h"
#include "tools/train/report_data.h"

namespace crumb::train {

// The report's data from the chosen plan, plus the plans of the sweep's micro-batch sizes (compiled
// here): the BatchNorm group (1 without BatchNorm) times powers of 2 below the batch, the batch, the
// chosen size and `extra` sizes (the --sweep trials').
ReportData collect_report(const Graph& g, const MicroBatchPlan& chosen, int batch, std::size_t budget,
                          const OptimizerConfig& opt, Device device, const std::vector<int>& extra);

// Rows of text behind a picture: written as an HTML table and as a CSV file from the same cells.
struct Table {
  std::string id, caption;  // id: "breakdown", "blocks", "timeline", "sweep", "trials", "measured"
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
// The report's tables: the breakdown, the arena blocks, the timeline and the sweep, then the trials and
// the measured figures where it has them.
std::vector<Table> report_tables(const ReportData& r);
// The report as a self-contained XHTML document (what --report writes), or as one <div> of its content
// without document or style (what a notebook shows inline).
std::string report_html(const ReportData& r, bool fragment = false);

// Every file the report may write (--report, then the --report-dir files), for check_file_uses.
std::vector<FileUse> report_outputs(const std::string& html_path, const std::string& dir);

// Where the report goes, checked when constructed (before a run spends time): the HTML file's folder
// must be writable, the --report-dir folder is created. An empty path skips that output. Each file is
// written whole and atomically (write_file_atomically): a failed write leaves the previous one intact.
// Throws crumb::Error naming the flag.
class ReportOutput {
 public:
  ReportOutput(const std::string& html_path, const std::string& dir);
  bool wanted() const { return !html_path_.empty() || !dir_.empty(); }
  void write(const ReportData& r);

 private:
  std::string html_path_, dir_;
};

}  // namespace crumb::train
