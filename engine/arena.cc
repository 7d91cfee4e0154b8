#include "engine/arena.h"

namespace crumb {

void Arena::reserve(std::size_t bytes) {
  if (bytes <= block_.size()) return;
  block_ = Buffer();  // free the old block first: old and new never need to coexist
  block_ = Buffer(bytes, memory_of(device_));
}

}  // namespace crumb
