#include "engine/io/fd.h"

#include <unistd.h>

namespace crumb {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

int Fd::close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

}  // namespace crumb
