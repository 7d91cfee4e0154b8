// A file descriptor, closed when it goes out of scope.
#pragma once

namespace crumb {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Hands the descriptor over (to gzdopen, which closes it itself).
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closing can report a deferred write error (NFS, quota), so a writer checks it.
  int close();

 private:
  int fd_;
};

}  // namespace crumb
