// A fuzz input as a file the parsers open by path: an anonymous in-memory file (memfd), named by its
// /proc/self/fd path, so no input ever touches the disk.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace crumb::fuzz {

class MemFile {
 public:
  MemFile(const uint8_t* data, std::size_t size) : fd_(::memfd_create("crumb-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    while (size > 0) {
      const ssize_t w = ::write(fd_, data, size);
      if (w <= 0) std::abort();
      data += w;
      size -= static_cast<std::size_t>(w);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace crumb::fuzz
