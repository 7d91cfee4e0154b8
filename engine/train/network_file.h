// A network description in a file (train's --model-file), read as every input is (engine/io/input_file.h:
// a regular file, never blocking on a FIFO) and bounded: the largest description Crumb's models need is
// well under a MiB, so a file past kMaxNetworkFileBytes is a mistake (a data file, a device), refused
// before it is read.
#pragma once
#include <cstdint>
#include <string>

namespace crumb {

constexpr uint64_t kMaxNetworkFileBytes = uint64_t{32} << 20;

// The text of the file at path; errors read "--model-file <path>: ...".
std::string read_network_file(const std::string& path);

}  // namespace crumb
