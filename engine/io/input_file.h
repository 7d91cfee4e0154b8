// Every file a run reads (data sets, network descriptions, checkpoints) is opened here, the same way:
// - read-only with O_NONBLOCK, so opening a FIFO returns at once instead of waiting for a writer;
// - checked with fstat on the descriptor opened (what is checked is what is read): regular files only, as
//   a FIFO would block the first read and a device such as /dev/zero never ends;
// - read within bounds: a whole read takes a file no larger than the caller's limit, and a read at an
//   offset must find every byte the size at open promised (a file cut short meanwhile is an error).
// Memory-mapped inputs start here too (engine/io/mapped_file.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

#include "engine/io/fd.h"

namespace crumb {

class InputFile {
 public:
  // Opens path. Errors are one crumb::Error starting with `name`, how the file is named to the user
  // ("checkpoint a.st", "IDX file 'x'", "--model-file net.json"); `missing` (what to do) follows
  // "not found" when the file does not exist.
  InputFile(const std::string& path, const std::string& name, const std::string& missing = "");

  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }  // at open
  const timespec& mtime() const { return mtime_; }  // its modification time at open

  // Exactly n bytes at offset into dst.
  void read_at(void* dst, std::size_t n, uint64_t offset) const;
  // The whole file, which may hold at most `limit` bytes (else an error giving the limit of `what`, e.g.
  // "a network description").
  std::string read_all(uint64_t limit, const std::string& what) const;
  // Hands the descriptor over (gzdopen closes it itself).
  int release() { return fd_.release(); }

 private:
  std::string path_, name_;
  Fd fd_;
  uint64_t size_ = 0;
  timespec mtime_{};
};

// "32 MiB", "100 MB", "1234 bytes": a limit as an error message gives it.
std::string byte_limit_text(uint64_t bytes);

}  // namespace crumb
