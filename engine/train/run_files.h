// The files of a run, and the check that none of its outputs replaces one of its inputs or another output,
// made by the Trainer for every client (train, the Python module, a C++ program) before anything is read.
#pragma once
#include <vector>

#include "engine/io/output_file.h"
#include "engine/train/trainer.h"

namespace crumb {

// Every file a run on cfg reads or writes, named by its flag: --save and its optimizer files (outputs;
// they may replace the --resume checkpoint they continue), --log, --load, --resume and their optimizer files,
// every file the data set could read (engine/data/source.h's data_files, existing or not: an output must
// not take the name of a file a later run would read) and the client's own (cfg.files).
std::vector<FileUse> run_files(const TrainConfig& cfg);

// check_file_uses (engine/io/output_file.h) over run_files(cfg): one crumb::Error naming both flags and the
// file when an output is an input or another output. Opens and reads nothing.
void check_run_files(const TrainConfig& cfg);

}  // namespace crumb
