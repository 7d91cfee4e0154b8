#include "engine/data/idx.h"

#include <unistd.h>

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "engine/base/error.h"
#include "engine/io/input_file.h"

namespace crumb::data {
namespace {

// Bounds the allocation a header can request, so a corrupt or hostile header cannot make us try
// to allocate petabytes; Fashion-MNIST's largest file is 47 MB.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 31;
// Payloads are read in steps of this size; gzread's length is an unsigned int.
constexpr size_t kGrowStep = size_t{1} << 26;

const char* kInstallHint =
    "install it with `apt-get install dataset-fashion-mnist` or point to it with `--data DIR`";

// gzopen/gzread detect the gzip magic (1f 8b) themselves and read other files verbatim, so one
// code path serves both compressed and plain IDX files.
class Reader {
 public:
  // Opened as every input is (engine/io/input_file.h: a regular file, never blocking on a FIFO).
  explicit Reader(const std::string& path) : path_(path) {
    InputFile file(path, "IDX file '" + path + "'", kInstallHint);
    const int fd = file.release();
    gz_ = gzdopen(fd, "rb");
    if (!gz_) {
      ::close(fd);
      CRUMB_FAIL("IDX file '", path, "': cannot read: out of memory");
    }
    gzbuffer(gz_, 1 << 17);
  }
  ~Reader() { gzclose(gz_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Reads up to n <= kGrowStep bytes; fewer only at end of input. A damaged gzip stream (bad data,
  // bad CRC, cut short) is reported here rather than surfacing later as a misleading size error.
  size_t read(uint8_t* dst, size_t n) {
    const int r = gzread(gz_, dst, static_cast<unsigned>(n));
    check_stream();
    return r > 0 ? static_cast<size_t>(r) : 0;
  }

  // Counts what is left, in a bounded buffer, so trailing garbage is reported with its size.
  uint64_t drain() {
    uint8_t buf[4096];
    uint64_t total = 0;
    for (size_t r; (r = read(buf, sizeof buf)) > 0;) total += r;
    return total;
  }

 private:
  void check_stream() {
    int errnum = Z_OK;
    std::string msg = gzerror(gz_, &errnum);
    // zlib prefixes its message with the path, which ours already names.
    if (msg.compare(0, path_.size() + 2, path_ + ": ") == 0) msg.erase(0, path_.size() + 2);
    if (errnum == Z_ERRNO) CRUMB_FAIL("IDX file '", path_, "': read error: ", msg);
    if (errnum != Z_OK)
      CRUMB_FAIL("IDX file '", path_, "': corrupt or truncated gzip stream (", msg, ")");
  }

  std::string path_;
  gzFile gz_ = nullptr;
};

uint32_t load_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string hex_byte(uint8_t b) {
  const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

}  // namespace

std::string default_data_dir() {
  const char* env = std::getenv("CRUMB_DATA");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

namespace {
// Reads and checks the header (magic, type, dimensions); returns the payload size in bytes.
uint64_t read_header(Reader& in, const std::string& path, IdxArray& out) {
  uint8_t head[4];
  const size_t got_head = in.read(head, 4);
  CRUMB_CHECK(got_head == 4, "IDX file '", path, "': truncated header (expected 4 bytes, got ",
              got_head, ")");
  CRUMB_CHECK(head[0] == 0 && head[1] == 0, "IDX file '", path, "': bad magic ", hex_byte(head[0]),
              " ", hex_byte(head[1]), " (expected 0x00 0x00); not an IDX file");
  CRUMB_CHECK(head[2] == 0x08, "IDX file '", path, "': unsupported IDX type code ",
              hex_byte(head[2]), " (only 0x08, unsigned byte, is supported)");
  const int ndims = head[3];
  CRUMB_CHECK(ndims > 0, "IDX file '", path, "': header declares 0 dimensions");

  out.dims.resize(ndims);
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    uint8_t raw[4];
    const size_t got = in.read(raw, 4);
    CRUMB_CHECK(got == 4, "IDX file '", path, "': truncated header while reading dimension ", i,
                " of ", ndims);
    const uint32_t d = load_be32(raw);
    CRUMB_CHECK(d > 0, "IDX file '", path, "': dimension ", i, " is 0");
    // Checked per factor so the running product never overflows 64 bits.
    CRUMB_CHECK(d <= kMaxPayloadBytes && total * d <= kMaxPayloadBytes, "IDX file '", path,
                "': dimension ", i, " = ", d, " makes the payload larger than the ",
                kMaxPayloadBytes, "-byte limit");
    CRUMB_CHECK(d <= 0x7fffffffu, "IDX file '", path, "': dimension ", i, " = ", d, " exceeds 2^31 - 1");
    total *= d;
    out.dims[i] = static_cast<int>(d);
  }
  return total;
}
}  // namespace

std::vector<int> read_idx_dims(const std::string& path) {
  Reader in(path);
  IdxArray out;
  read_header(in, path, out);
  return out.dims;
}

IdxArray read_idx(const std::string& path) {
  Reader in(path);
  IdxArray out;
  const uint64_t total = read_header(in, path, out);

  // Grown as data actually arrives, so a header that lies about its size costs no more memory than
  // the file really holds.
  size_t got = 0;
  while (got < total) {
    const size_t step = std::min<uint64_t>(total - got, kGrowStep);
    out.bytes.resize(got + step);
    const size_t r = in.read(out.bytes.data() + got, step);
    got += r;
    if (r < step) break;
  }
  CRUMB_CHECK(got == total, "IDX file '", path, "': truncated payload: expected ", total,
              " bytes, got ", got);
  const uint64_t extra = in.drain();
  CRUMB_CHECK(extra == 0, "IDX file '", path, "': ", extra,
              " trailing bytes after the declared payload of ", total, " bytes");
  return out;
}

namespace {

// The file of `stem` in dir, or "" if there is none. Prefers the compressed name (what the Debian
// package ships) but accepts an unpacked copy.
std::string find_file(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const fs::path& p : {fs::path(dir) / (stem + ".gz"), fs::path(dir) / stem})
    if (fs::exists(p, ec)) return p.string();
  return "";
}

std::string resolve(const std::string& dir, const std::string& stem) {
  const std::string path = find_file(dir, stem);
  CRUMB_CHECK(!path.empty(), "MNIST file '", (std::filesystem::path(dir) / (stem + ".gz")).string(), "' not found (nor '",
              (std::filesystem::path(dir) / stem).string(), "'); ", kInstallHint);
  return path;
}

}  // namespace

std::vector<int> mnist_image_dims(const std::string& dir, const std::string& split) {
  const std::string path = resolve(dir, split + "-images-idx3-ubyte");
  const std::vector<int> dims = read_idx_dims(path);
  CRUMB_CHECK(dims.size() == 3, "IDX file '", path, "': images must be 3-D, got ", dims.size(), " dimensions");
  return dims;
}

bool mnist_split_exists(const std::string& dir, const std::string& split) {
  return !find_file(dir, split + "-images-idx3-ubyte").empty();
}

Dataset load_mnist_split(const std::string& dir, const std::string& split) {
  const std::string image_path = resolve(dir, split + "-images-idx3-ubyte");
  const std::string label_path = resolve(dir, split + "-labels-idx1-ubyte");
  IdxArray images = read_idx(image_path);
  IdxArray labels = read_idx(label_path);

  CRUMB_CHECK(images.dims.size() == 3, "IDX file '", image_path,
              "': images must be 3-D [count, height, width], got ", images.dims.size(), "-D");
  CRUMB_CHECK(labels.dims.size() == 1, "IDX file '", label_path, "': labels must be 1-D, got ",
              labels.dims.size(), "-D");
  CRUMB_CHECK(images.dims[0] == labels.dims[0], "IDX file '", label_path, "' has ",
              labels.dims[0], " labels but '", image_path, "' has ", images.dims[0], " images");

  Dataset ds;
  ds.count = images.dims[0];
  ds.channels = 1;
  ds.height = images.dims[1];
  ds.width = images.dims[2];
  ds.num_classes = 10;
  ds.labels.resize(ds.count);
  for (int i = 0; i < ds.count; ++i) {
    const uint8_t y = labels.bytes[i];
    CRUMB_CHECK(y < ds.num_classes, "IDX file '", label_path, "': label ", int{y}, " at index ", i,
                " is out of range [0, ", ds.num_classes, ")");
    ds.labels[i] = y;
  }
  ds.pixels = std::move(images.bytes);
  return ds;
}

}  // namespace crumb::data
