// .npy files as numpy.save writes them, byte by byte, for the tests of --dataset npy.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace crumb::test {

// Magic, version, header padded with spaces to a multiple of 64 bytes and ended by a newline, then the data.
inline std::string npy(const std::string& descr, const std::string& shape, const void* data, std::size_t bytes,
                       const std::string& fortran = "False", int version = 1) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(version);
  out += char(0);
  for (int i = 0; i < (version == 1 ? 2 : 4); ++i) out += char(header.size() >> (8 * i) & 255);
  return out + header + std::string(static_cast<const char*>(data), bytes);
}

template <class T>
std::string npy(const std::string& descr, const std::string& shape, const std::vector<T>& v) {
  return npy(descr, shape, v.data(), v.size() * sizeof(T));
}

}  // namespace crumb::test
