#include "engine/base/tensor.h"

#include <sstream>

namespace crumb {

std::string dims_str(const Dims& d) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  os << ']';
  return os.str();
}

}  // namespace crumb
