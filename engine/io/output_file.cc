#include "engine/io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/base/error.h"

namespace crumb {
namespace {

void write_all(int fd, const char* p, std::size_t n, const std::string& what, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    CRUMB_CHECK(w > 0, "cannot write ", what, " ", path, ": ", std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// What a path refers to: an existing file by device and inode (so hard and symbolic links match), or
// a file still to be created by its absolute path with ".", ".." and linked folders resolved.
struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;
};

Identity identify(const FileUse& u) {
  Identity id;
  struct stat st;
  if (u.output && ::lstat(u.path.c_str(), &st) == 0) {
    CRUMB_CHECK(!S_ISLNK(st.st_mode), u.flag, ": ", u.path,
                " is a symbolic link; outputs are never written through one: name the file itself");
    CRUMB_CHECK(S_ISREG(st.st_mode), u.flag, ": ", u.path,
                S_ISDIR(st.st_mode) ? " is a folder; it is never replaced"
                                    : " is not a regular file (a FIFO, socket or device); outputs go to regular "
                                      "files only");
  }
  if (::stat(u.path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
  }
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(u.path, ec);
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(abs, ec);
  id.path = (ec ? abs.lexically_normal() : canonical).string();
  return id;
}

bool same_file(const Identity& a, const Identity& b) {
  if (a.exists != b.exists) return false;
  return a.exists ? a.dev == b.dev && a.ino == b.ino : a.path == b.path;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces,
                           const std::string& what) {
  // A name of its own (two writers never share one), created exclusively and never through a link: a
  // file or link planted at the temporary name is refused instead of being written through.
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  CRUMB_CHECK(fd.get() >= 0, "cannot write ", what, " ", path, ": creating ", tmp, ": ", std::strerror(errno));
  try {
    for (std::string_view p : pieces) write_all(fd.get(), p.data(), p.size(), what, path);
    // Data on disk before the rename makes it visible: otherwise a crash can leave an empty file at path.
    CRUMB_CHECK(::fsync(fd.get()) == 0, "cannot write ", what, " ", path, ": fsync: ", std::strerror(errno));
    CRUMB_CHECK(fd.close() == 0, "cannot write ", what, " ", path, ": close: ", std::strerror(errno));
    CRUMB_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot write ", what, " ", path, ": renaming ", tmp, ": ",
                std::strerror(errno));
    // The rename itself on disk: without it a crash can bring the old file back (or none).
    const std::string dir = std::filesystem::path(path).parent_path().string();
    Fd d(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    CRUMB_CHECK(d.get() >= 0 && ::fsync(d.get()) == 0, "cannot write ", what, " ", path, ": fsync of its folder: ",
                std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

std::string create_unique_file(const std::string& dir, const std::string& prefix, const std::string& suffix) {
  std::string name = (std::filesystem::path(dir) / (prefix + "XXXXXX" + suffix)).string();
  const int fd = ::mkstemps(name.data(), static_cast<int>(suffix.size()));
  if (fd < 0) return "";
  ::close(fd);
  return name;
}

void check_file_uses(const std::vector<FileUse>& uses) {
  std::vector<Identity> ids;
  ids.reserve(uses.size());
  for (const FileUse& u : uses) ids.push_back(identify(u));
  for (std::size_t i = 0; i < uses.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      if (!uses[i].output && !uses[j].output) continue;
      const std::size_t wi = uses[i].output ? i : j, oi = wi == i ? j : i;  // wi writes; oi writes or reads
      const FileUse &w = uses[wi], &o = uses[oi];
      if (!o.output && w.may_replace == o.flag) continue;
      if (!same_file(ids[wi], ids[oi])) continue;
      CRUMB_FAIL(w.flag, " ", w.path, " is the same file as ", o.flag, " ", o.path, ", which the run ",
                 o.output ? "also writes" : "reads", ": give ", w.flag, " a file of its own");
    }
}

}  // namespace crumb
