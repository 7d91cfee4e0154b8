// The op cases (tests/ops/registry.h) as GoogleTest parameters: test names are case names, and a failing
// case prints as its name.
#pragma once
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "tests/ops/registry.h"

namespace crumb::test {

inline std::string op_case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

}  // namespace crumb::test
