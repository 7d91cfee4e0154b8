#include "engine/data/npy.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "engine/base/error.h"
#include "engine/io/input_file.h"
#include "engine/io/mapped_file.h"

namespace crumb::data {
namespace {

// The header's Python dict literal, {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }: exactly
// the three keys NumPy writes, string, boolean and tuple-of-integers values.
class HeaderParser {
 public:
  HeaderParser(const char* text, std::size_t size, const std::string& path) : s_(text), n_(size), path_(path) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool seen[3] = {false, false, false};
    expect('{');
    while (!peek('}')) {
      const std::string key = string();
      expect(':');
      int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0) fail("unexpected key '" + key + "' (a .npy header has descr, fortran_order and shape)");
      if (seen[k]) fail("key '" + key + "' appears twice");
      seen[k] = true;
      if (k == 0) {
        if (!peek('\'') && !peek('"')) fail("descr is not a plain dtype string (structured arrays are not images)");
        descr = string();
      } else if (k == 1) {
        fortran = boolean();
      } else {
        shape = tuple();
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (i_ != n_) fail("unexpected text after the header's dict");
    if (!seen[0] || !seen[1] || !seen[2]) fail("the header lacks descr, fortran_order or shape");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { CRUMB_FAIL(path_, ": bad .npy header: ", what); }
  void skip_space() {
    while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool peek(char c) {
    skip_space();
    return i_ < n_ && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "' at byte " + std::to_string(i_) + " of the header");
    ++i_;
  }
  std::string string() {
    skip_space();
    if (i_ >= n_ || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string at byte " + std::to_string(i_));
    const char quote = s_[i_++];
    const std::size_t start = i_;
    while (i_ < n_ && s_[i_] != quote) ++i_;
    if (i_ >= n_) fail("unterminated string");
    return std::string(s_ + start, s_ + i_++);
  }
  bool boolean() {
    skip_space();
    for (const char* word : {"True", "False"}) {
      const std::size_t len = std::strlen(word);
      if (n_ - i_ >= len && std::memcmp(s_ + i_, word, len) == 0) {
        i_ += len;
        return word[0] == 'T';
      }
    }
    fail("fortran_order must be True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      if (i_ >= n_ || s_[i_] < '0' || s_[i_] > '9') fail("shape must be a tuple of non-negative integers");
      int64_t d = 0;
      while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') {
        if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a shape dimension is too large");
        d = d * 10 + (s_[i_++] - '0');
      }
      if (i_ < n_ && s_[i_] == 'L') ++i_;  // Python 2's long suffix
      dims.push_back(d);
      if (dims.size() > 32) fail("shape has more than 32 dimensions");
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  const char* s_;
  std::size_t n_, i_ = 0;
  const std::string& path_;
};

uint32_t little_endian(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The labels of the .npy file opened as f, of any integer dtype, each checked to lie in [0, classes)
// (classes 0: any non-negative value). Their shape is checked before their data is read.
std::vector<int32_t> read_labels(const InputFile& f, const NpyArray& y, int classes) {
  const std::string& path = f.name();
  CRUMB_CHECK(y.kind == 'i' || y.kind == 'u', path, ": labels must be integers, got dtype ", y.dtype());
  CRUMB_CHECK(y.shape.size() == 1, path, ": labels must have shape (N,), got ", y.shape.size(), " dimensions");
  CRUMB_CHECK(y.shape[0] <= std::numeric_limits<int32_t>::max(), path, ": ", y.shape[0], " labels are too many");
  std::vector<uint8_t> data(static_cast<std::size_t>(y.shape[0]) * y.itemsize);
  f.read_at(data.data(), data.size(), y.offset);
  std::vector<int32_t> labels(static_cast<std::size_t>(y.shape[0]));
  const uint64_t limit = classes ? uint64_t(classes) : uint64_t{std::numeric_limits<int32_t>::max()};
  for (std::size_t i = 0; i < labels.size(); ++i) {
    uint64_t raw = 0;
    std::memcpy(&raw, data.data() + i * y.itemsize, y.itemsize);  // little-endian, like the host
    if (y.kind == 'i') {
      const int shift = 64 - 8 * y.itemsize;  // sign-extends the element
      const int64_t v = static_cast<int64_t>(raw << shift) >> shift;
      CRUMB_CHECK(v >= 0, path, ": label ", v, " at index ", i, " is negative");
    }
    CRUMB_CHECK(raw < limit, path, ": label ", raw, " at index ", i,
                classes ? " is not below the " + std::to_string(classes) + " classes of the training labels"
                        : " would make " + std::to_string(raw + 1) + " classes (the largest label + 1), more than the " +
                              std::to_string(limit) + " a class count can be: check the labels");
    labels[i] = static_cast<int32_t>(raw);
  }
  return labels;
}

// The header of the .npy file opened as f, read from its first bytes.
NpyArray read_header(const InputFile& f) {
  std::vector<uint8_t> head(static_cast<std::size_t>(std::min<uint64_t>(f.size(), 12 + kMaxNpyHeaderBytes)));
  f.read_at(head.data(), head.size(), 0);
  return parse_npy_header(head.data(), head.size(), f.size(), f.name());
}

const char* kNpyFiles = "--dataset npy reads DIR/x.npy and DIR/y.npy";

}  // namespace

std::string NpyArray::dtype() const {
  const std::string bits = std::to_string(8 * itemsize);
  switch (kind) {
    case 'u': return "uint" + bits;
    case 'i': return "int" + bits;
    case 'f': return "float" + bits;
    case 'b': return "bool";
    default: return std::string("'") + kind + std::to_string(itemsize) + "'";
  }
}

NpyArray parse_npy_header(const uint8_t* bytes, std::size_t size, uint64_t file_size, const std::string& path) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  CRUMB_CHECK(size >= 10 && std::memcmp(bytes, kMagic, 6) == 0, path,
              ": not a .npy file (no \\x93NUMPY magic; write it with numpy.save)");
  const int major = bytes[6];
  CRUMB_CHECK(major >= 1 && major <= 3, path, ": .npy format version ", major, ".", int(bytes[7]),
              " is not supported (1.0 to 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  const std::size_t start = 8 + len_bytes;
  CRUMB_CHECK(size >= start, path, ": truncated .npy header");
  const std::size_t header_len = little_endian(bytes + 8, len_bytes);
  CRUMB_CHECK(header_len <= file_size - start, path, ": truncated .npy header (", header_len, " bytes announced, ",
              file_size - start, " there)");
  CRUMB_CHECK(header_len <= kMaxNpyHeaderBytes, path, ": .npy header of ", header_len, " bytes, more than the ",
              kMaxNpyHeaderBytes >> 20, " MiB a header may hold here");
  CRUMB_CHECK(header_len <= size - start, path, ": parse_npy_header was given ", size, " of its first bytes, not the "
              "whole header");
  std::string descr;
  bool fortran = false;
  NpyArray a;
  HeaderParser(reinterpret_cast<const char*>(bytes + start), header_len, path).parse(descr, fortran, a.shape);
  // '<' little-endian, '|' no byte order (one byte), '=' the host's, which is little-endian.
  const bool digits = descr.size() >= 3 && std::all_of(descr.begin() + 2, descr.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  CRUMB_CHECK(digits && descr.size() <= 4 && std::string("<>|=").find(descr[0]) != std::string::npos, path, ": dtype '", descr,
              "' is not a plain numeric dtype (uint8 or float32 images, integer labels)");
  a.kind = descr[1];
  a.itemsize = std::stoi(descr.substr(2));
  CRUMB_CHECK(descr[0] != '>' || a.itemsize == 1, path, ": dtype '", descr,
              "' is big-endian; save it little-endian (arr.astype(arr.dtype.newbyteorder('<')))");
  CRUMB_CHECK(a.itemsize >= 1 && a.itemsize <= 8, path, ": dtype '", descr, "' has elements of ", a.itemsize,
              " bytes (at most 8 are read)");
  CRUMB_CHECK(!fortran, path, ": the array is in Fortran order; save it in C order (numpy.ascontiguousarray)");
  uint64_t elements = 1;
  for (int64_t d : a.shape) {
    CRUMB_CHECK(d == 0 || elements <= (uint64_t{1} << 62) / static_cast<uint64_t>(d), path, ": shape is too large");
    elements *= static_cast<uint64_t>(d);
  }
  const std::size_t data_start = start + header_len;
  CRUMB_CHECK(elements <= (uint64_t{1} << 62) / static_cast<uint64_t>(a.itemsize), path, ": shape is too large");
  const uint64_t need = elements * static_cast<uint64_t>(a.itemsize), have = file_size - data_start;
  CRUMB_CHECK(have >= need, path, ": truncated: its shape and dtype need ", need, " bytes of data, the file holds ",
              have);
  CRUMB_CHECK(have == need, path, ": ", have - need, " bytes after the data its shape and dtype describe");
  // Elements are read in place: they must be aligned (numpy.save pads the header to 64 bytes).
  CRUMB_CHECK(data_start % static_cast<std::size_t>(a.itemsize) == 0, path, ": the data starts at byte ", data_start,
              ", not a multiple of its ", a.itemsize, "-byte elements");
  a.offset = data_start;
  return a;
}

NpyArray parse_npy(const uint8_t* bytes, std::size_t size, const std::string& path) {
  NpyArray a = parse_npy_header(bytes, size, size, path);
  a.data = bytes + a.offset;
  return a;
}

Dataset load_npy(const std::string& x_path, const std::string& y_path, int classes) {
  InputFile xf(x_path, x_path, kNpyFiles);
  const InputFile yf(y_path, y_path, kNpyFiles);
  const NpyArray x = read_header(xf), y = read_header(yf);
  const bool u8 = x.kind == 'u' && x.itemsize == 1, f32 = x.kind == 'f' && x.itemsize == 4;
  CRUMB_CHECK(u8 || f32, x_path, ": images must be uint8 or float32, got ", x.dtype(),
              " (convert with x.astype('float32'))");
  CRUMB_CHECK(x.shape.size() == 4, x_path, ": images must have shape (N, C, H, W), got ", x.shape.size(),
              " dimensions (add a channel axis with x[:, None])");
  for (int64_t d : x.shape) CRUMB_CHECK(d >= 1, x_path, ": images must have shape (N, C, H, W) with every size >= 1");
  const int64_t sample = x.shape[1] * x.shape[2] * x.shape[3];
  CRUMB_CHECK(x.shape[0] <= std::numeric_limits<int32_t>::max() && sample <= std::numeric_limits<int32_t>::max(),
              x_path, ": ", x.shape[0], " images of ", sample, " values are too large");
  Dataset ds;
  ds.labels = read_labels(yf, y, classes);
  CRUMB_CHECK(int64_t(ds.labels.size()) == x.shape[0], y_path, ": holds ", ds.labels.size(), " labels, but ", x_path,
              " holds ", x.shape[0], " images");
  ds.count = static_cast<int>(x.shape[0]);
  ds.channels = static_cast<int>(x.shape[1]);
  ds.height = static_cast<int>(x.shape[2]);
  ds.width = static_cast<int>(x.shape[3]);
  // Every label is below INT32_MAX (read_labels), so the largest + 1 fits.
  ds.num_classes = classes ? classes : 1 + (ds.labels.empty() ? 0 : *std::max_element(ds.labels.begin(), ds.labels.end()));
  // Mapped as large as the header was checked against: every image lies inside the map.
  auto map = std::make_shared<const MappedFile>(std::move(xf));
  ds.mapped = {map->data() + x.offset, f32 ? PixelType::F32 : PixelType::U8, map, map.get()};
  ds.images = x_path;
  return ds;
}

void load_npy_dir(const std::string& dir, Dataset& train, Dataset& test) {
  namespace fs = std::filesystem;
  const std::string x = (fs::path(dir) / "x.npy").string(), y = (fs::path(dir) / "y.npy").string();
  const std::string xt = (fs::path(dir) / "x_test.npy").string(), yt = (fs::path(dir) / "y_test.npy").string();
  train = load_npy(x, y);
  CRUMB_CHECK(train.num_classes >= 2, y, ": every label is 0; training needs at least 2 classes");
  const bool has_test = fs::exists(xt), has_test_labels = fs::exists(yt);
  CRUMB_CHECK(has_test == has_test_labels, dir, ": has ", has_test ? xt : yt, " but not ", has_test ? yt : xt,
              " (a test set needs both)");
  if (has_test) {
    test = load_npy(xt, yt, train.num_classes);
    CRUMB_CHECK(test.pixel_type() == train.pixel_type(), xt, ": its dtype differs from that of ", x,
                " (both uint8 or both float32)");
    CRUMB_CHECK(test.channels == train.channels && test.height == train.height && test.width == train.width, xt,
                ": images are ", test.channels, "x", test.height, "x", test.width, " but those of ", x, " are ",
                train.channels, "x", train.height, "x", train.width);
    return;
  }
  // No test files: the last tenth of x.npy is the test set.
  CRUMB_CHECK(train.count >= 2, x, ": holds ", train.count, " image; with no x_test.npy at least 2 are needed "
              "(the last tenth is held out for testing)");
  const int held = std::max(1, train.count / 10), kept = train.count - held;
  const std::size_t element = train.pixel_type() == PixelType::F32 ? sizeof(float) : 1;
  test = train;
  test.count = held;
  test.labels.assign(train.labels.begin() + kept, train.labels.end());
  test.mapped.data = static_cast<const uint8_t*>(train.mapped.data) + std::size_t(kept) * train.sample_size() * element;
  test.first = kept;
  train.keep_first(kept);
}

}  // namespace crumb::data
