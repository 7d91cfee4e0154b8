// libFuzzer target: the convolution algorithm choices a checkpoint records ("train.conv_algos",
// engine/ops/conv2d_algo.h), read into a graph. Any input either gives choices that each read back as
// winograd or direct, or throws crumb::Error. Anything else (a crash, a sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/base/error.h"
#include "engine/ops/conv2d_algo.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  crumb::Graph g;
  try {
    crumb::set_conv_choices(g, text, "fuzz input");
    for (const auto& [key, choice] : g.kernel_choices())
      if (key.empty() || (choice != "winograd" && choice != "direct")) std::abort();
  } catch (const crumb::Error&) {
  }
  return 0;
}
