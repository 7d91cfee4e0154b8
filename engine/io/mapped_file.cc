#include "engine/io/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "engine/base/error.h"

namespace crumb {

MappedFile::MappedFile(InputFile file) : file_(std::move(file)) {
  // The size and time at open, which what the caller read of the file (a header) agrees with.
  mtime_ = file_.mtime();
  const uint64_t size = file_.size();
  if (size == 0) return;
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, file_.fd(), 0);
  CRUMB_CHECK(p != MAP_FAILED, file_.name(), ": cannot map into memory: ", std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  size_ = static_cast<std::size_t>(size);
}

MappedFile::~MappedFile() {
  if (size_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::check_unchanged() const {
  struct stat st;
  CRUMB_CHECK(::fstat(file_.fd(), &st) == 0, file_.name(), ": cannot read: ", std::strerror(errno));
  const uint64_t now = static_cast<uint64_t>(st.st_size);
  if (now < size_)
    changed("was truncated", "to " + std::to_string(now) + " of its " + std::to_string(size_) + " bytes");
  if (now > size_) changed("changed", "it grew from " + std::to_string(size_) + " to " + std::to_string(now) + " bytes");
  if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec)
    changed("changed", "it was written to");
}

void MappedFile::changed(const char* what, const std::string& how) const {
  CRUMB_FAIL(file_.name(), " ", what, " while training (", how, "): a data file is read in place until the run "
             "ends; to replace it, write the new one under another name and rename it over the old (numpy.save to "
             "a temporary name, then os.replace): a running process keeps reading the file it opened");
}

}  // namespace crumb
