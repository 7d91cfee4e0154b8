// The one exception type of Crumb. Messages name the file/layer/shape at fault and what to do.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace crumb {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... A>
std::string concat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}
}  // namespace detail

}  // namespace crumb

// CRUMB_CHECK(cond, parts...): throws crumb::Error with the parts streamed together.
#define CRUMB_CHECK(cond, ...)                                              \
  do {                                                                      \
    if (!(cond)) throw ::crumb::Error(::crumb::detail::concat(__VA_ARGS__)); \
  } while (0)
#define CRUMB_FAIL(...) throw ::crumb::Error(::crumb::detail::concat(__VA_ARGS__))
