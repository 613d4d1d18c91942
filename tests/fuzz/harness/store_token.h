// The job token of the store harness's server; make_corpus records its clients with it.
#pragma once

#include <string_view>

namespace fuzz {
inline constexpr std::string_view kStoreFuzzToken = "0123456789abcdef0123456789abcdef";
}
