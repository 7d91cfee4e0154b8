#include "engine/train/run_files.h"

#include <string>

#include "engine/data/source.h"
#include "engine/io/checkpoint.h"

namespace crumb {

std::vector<FileUse> run_files(const TrainConfig& c) {
  std::vector<FileUse> uses;
  // A checkpoint is three files; --save may replace what --resume reads (read whole before the first save,
  // then replaced atomically).
  auto checkpoint = [&](const std::string& flag, const std::string& path, bool output) {
    if (path.empty()) return;
    uses.push_back({flag, path, output, output ? "--resume" : ""});
    uses.push_back(
        {flag + "'s optimizer file", optimizer_path(path), output, output ? "--resume's optimizer file" : ""});
    uses.push_back({flag + "'s previous optimizer file", previous_optimizer_path(path), output,
                    output ? "--resume's previous optimizer file" : ""});
  };
  checkpoint("--save", c.save, true);
  checkpoint("--load", c.load, false);
  checkpoint("--resume", c.resume, false);
  for (const std::string& f : data::data_files(c.data)) uses.push_back({"--data", f, false, ""});
  uses.insert(uses.end(), c.files.begin(), c.files.end());
  if (!c.log.empty()) uses.push_back({"--log", c.log, true, ""});
  return uses;
}

void check_run_files(const TrainConfig& c) { check_file_uses(run_files(c)); }

}  // namespace crumb
