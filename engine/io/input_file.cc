#include "engine/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/base/error.h"

namespace crumb {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a special file";
}

}  // namespace

std::string byte_limit_text(uint64_t bytes) {
  if (bytes % (uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % 1000000 == 0) return std::to_string(bytes / 1000000) + " MB";
  return std::to_string(bytes) + " bytes";
}

InputFile::InputFile(const std::string& path, const std::string& name, const std::string& missing)
    : path_(path), name_(name), fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
  if (fd_.get() < 0) {
    const int err = errno;
    CRUMB_CHECK(err != ENOENT, name_, ": not found", missing.empty() ? "" : "; " + missing);
    CRUMB_FAIL(name_, ": cannot open: ", std::strerror(err));
  }
  struct stat st;
  CRUMB_CHECK(::fstat(fd_.get(), &st) == 0, name_, ": cannot read: ", std::strerror(errno));
  CRUMB_CHECK(S_ISREG(st.st_mode), name_, ": not a regular file (", kind_of(st.st_mode),
              "); inputs are read from regular files only");
  size_ = static_cast<uint64_t>(st.st_size);
  mtime_ = st.st_mtim;
}

void InputFile::read_at(void* dst, std::size_t n, uint64_t offset) const {
  char* p = static_cast<char*>(dst);
  const uint64_t end = offset + n;
  while (n > 0) {
    const ssize_t r = ::pread(fd_.get(), p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    CRUMB_CHECK(r >= 0, name_, ": cannot read: ", std::strerror(errno));
    CRUMB_CHECK(r > 0, name_, ": ends at byte ", offset, " where ", end,
                " were expected (was it truncated while being read?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

std::string InputFile::read_all(uint64_t limit, const std::string& what) const {
  auto too_large = [&](uint64_t bytes, const char* qualifier) {
    CRUMB_FAIL(name_, ": ", qualifier, bytes, " bytes, more than the ", byte_limit_text(limit), " ", what,
               " may hold");
  };
  if (size_ > limit) too_large(size_, "");
  // Read to the end, which a file still being written may have moved: never more than the limit.
  std::string text(static_cast<std::size_t>(size_), '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (got > limit) too_large(got, "over ");
      text.resize(got + 4096);
    }
    const ssize_t r = ::pread(fd_.get(), text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    CRUMB_CHECK(r >= 0, name_, ": cannot read: ", std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  if (got > limit) too_large(got, "over ");
  text.resize(got);
  return text;
}

}  // namespace crumb
