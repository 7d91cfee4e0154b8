// A whole input file mapped read-only, for data read in place (the .npy images of --dataset npy), which
// a run survives being changed under it: every read out of the map goes through read(), which turns a
// SIGBUS (a page past the end of a file truncated meanwhile, engine/io/mapped_read.h) into one crumb::Error
// naming the file, and checks afterwards that the file is still the one mapped (size and modification
// time), so what was read is what was mapped. The file stays open for those checks. Replacing the file by
// a rename (write elsewhere, then os.replace) leaves the mapped one alone and is no change here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

#include "engine/io/input_file.h"
#include "engine/io/mapped_read.h"

namespace crumb {

class MappedFile {
 public:
  // Maps the input opened as `file` whole, as large as it was when opened (an empty file maps nothing).
  explicit MappedFile(InputFile file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return file_.path(); }

  // Runs copy(), which reads the map (read_mapped's rules: plain reads and writes only), then checks the
  // file is unchanged. Throws "<name> was truncated while training (...)" or "<name> changed while
  // training (...)", with what to do, when either fails.
  template <class Copy>
  void read(Copy&& copy) const {
    if (!read_mapped(data_, size_, copy)) changed("was truncated", "a read out of its memory map failed");
    check_unchanged();
  }
  // Throws the same error unless the file still has the size and modification time it was mapped with.
  void check_unchanged() const;

 private:
  [[noreturn]] void changed(const char* what, const std::string& how) const;

  InputFile file_;
  const uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  timespec mtime_{};
};

}  // namespace crumb
