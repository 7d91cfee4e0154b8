// Writing files without ever destroying one: atomic replacement, unique new names, and the check that no
// output of a run names one of its inputs or another output (train's --save, --log, --report, ...).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "engine/io/fd.h"

namespace crumb {

// Writes the pieces, in order, to path through a temporary file of its own beside it
// ("<path>.tmp.<pid>.<n>", created exclusively, never through a link), fsynced, renamed over path and
// the rename fsynced: a crash, a kill or a full disk leaves the previous file intact, never a half-written
// one, and a symbolic link at path is replaced, never followed. Errors read "cannot write <what> <path>: ...".
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                           const std::string& what);

// Creates an empty file in dir named prefix + six random characters + suffix, exclusively (mkstemps), so
// no other process or call gets the same name; returns its path, or "" when dir cannot hold it.
std::string create_unique_file(const std::string& dir, const std::string& prefix, const std::string& suffix);

// One file a run reads or writes, named by the flag that gives it ("--save", "--resume's optimizer file").
struct FileUse {
  std::string flag;
  std::string path;
  bool output = false;
  // An output only: the flag of an input it may replace, read whole before the first write (--save
  // replacing the --resume checkpoint it continues).
  std::string may_replace;
};

// Throws one crumb::Error, naming both flags and the file, when an output is the same file as an input or
// as another output: the same path however written ("a", "./a", "d/../a"), or an existing file reached by a
// hard or symbolic link (compared by device and inode). Also refuses an output path that exists as a
// symbolic link or as anything but a regular file (a FIFO would block the run, a device swallow it).
// Reads nothing and opens nothing, so it runs before a run touches any file. Inputs that do not exist yet
// count too, by path: an output may not take the name of a file a later run would read.
void check_file_uses(const std::vector<FileUse>& uses);

}  // namespace crumb
