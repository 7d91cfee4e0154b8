#include "engine/train/network_file.h"

#include "engine/io/input_file.h"

namespace crumb {

std::string read_network_file(const std::string& path) {
  return InputFile(path, "--model-file " + path).read_all(kMaxNetworkFileBytes, "a network description");
}

}  // namespace crumb
