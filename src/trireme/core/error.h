// Errors: one exception type and the TRIREME_CHECK macro that builds its message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include <cstdint>

namespace trireme {

// Shapes and index lists print as [2, 3, 4] in every error message.
inline std::ostream& operator<<(std::ostream& os, const std::vector<int64_t>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os << ']';
}

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates anything streamable into one string: str_cat("op ", name, ": ", shape).
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace trireme

// Throws trireme::Error with the concatenated message when `cond` is false.
//   TRIREME_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got ", a.sizes());
#define TRIREME_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) [[unlikely]] {                                   \
      throw ::trireme::Error(::trireme::str_cat(__VA_ARGS__));    \
    }                                                             \
  } while (0)

#define TRIREME_FAIL(...) throw ::trireme::Error(::trireme::str_cat(__VA_ARGS__))
