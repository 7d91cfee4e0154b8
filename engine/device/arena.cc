#include "engine/device/arena.h"

#include "engine/base/error.h"
#include "engine/device/backend.h"

namespace crumb {

void Arena::reserve(std::size_t bytes) {
  if (bytes <= block_.size()) return;
  CRUMB_CHECK(attached_ == 0, "arena: growing from ", block_.size(), " to ", bytes, " bytes under ", attached_,
              " executor(s) using it; reserve the largest plan's size before building them");
  block_ = Buffer();  // free the old block first: old and new never need to coexist
  block_ = Buffer(bytes, memory_of(device_), index_);
}

}  // namespace crumb
