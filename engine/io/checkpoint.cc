#include "engine/io/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <climits>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "engine/base/error.h"
#include "engine/io/input_file.h"
#include "engine/io/json.h"
#include "engine/io/output_file.h"

namespace crumb {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is written straight from memory");

const std::string kStatePrefix = "optimizer.";
const std::string kMetadata = "__metadata__";

void check_master_dtype(const std::string& path, const ParamStore& params) {
  CRUMB_CHECK(params.dtype() == DType::F32 || params.dtype() == DType::F64, path,
              ": checkpoints hold float32 and float64 models, this one is ", dtype_name(params.dtype()));
}

std::size_t value_bytes(const Graph& g, ValueId v) {
  return static_cast<std::size_t>(g.value(v).count(1)) * dtype_size(g.value(v).dtype);
}
// A parameter as the store keeps it: in the master dtype, whatever dtype the ops read it in.
std::size_t param_bytes(const ParamStore& params, ValueId p) {
  return static_cast<std::size_t>(params.graph().value(p).count(1)) * dtype_size(params.dtype());
}

struct Chunk {
  std::string name;
  DType dtype;
  const Dims* dims;
  const char* data;
  std::size_t bytes;
};

// The safetensors header: the chunks' entries in order, then __metadata__ from `metadata` (key, value) pairs.
std::string header_json(const std::vector<Chunk>& chunks, const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string h = "{";
  std::size_t offset = 0;
  for (const Chunk& c : chunks) {
    h += json::quote(c.name) + ":{\"dtype\":\"" + dtype_name(c.dtype) + "\",\"shape\":[";
    for (std::size_t i = 0; i < c.dims->size(); ++i) h += (i ? "," : "") + std::to_string((*c.dims)[i]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + c.bytes) + "]},";
    offset += c.bytes;
  }
  h += json::quote(kMetadata) + ":{";
  for (std::size_t i = 0; i < metadata.size(); ++i)
    h += (i ? "," : "") + json::quote(metadata[i].first) + ":" + json::quote(metadata[i].second);
  h += "}}";
  // Spaces, as the reference implementation pads, so the data section starts 8-byte aligned.
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

struct FileTensor {
  std::string name;
  DType dtype = DType::F32;
  Dims dims;
  uint64_t begin = 0, end = 0;
};

// The safetensors format's own bound on a header (safetensors' HeaderTooLarge): a length field beyond it is
// a damaged or foreign file, never a reason to allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100000000;

const json::Value& field(const json::Value& entry, const char* key, json::Value::Kind kind, const std::string& path,
                         const std::string& tensor) {
  const json::Value* v = entry.find(key);
  CRUMB_CHECK(v, path, ": tensor '", tensor, "' has no \"", key, "\" in the header");
  CRUMB_CHECK(v->kind == kind, path, ": tensor '", tensor, "': \"", key, "\" must be ", json::kind_name(kind),
              ", found ", json::kind_name(v->kind));
  return *v;
}

FileTensor parse_tensor(const std::string& name, const json::Value& entry, uint64_t data_size, const std::string& path) {
  CRUMB_CHECK(entry.kind == json::Value::Kind::Object, path, ": header entry '", name, "' must be an object, found ",
              json::kind_name(entry.kind));
  FileTensor t;
  t.name = name;
  const std::string& dtype = field(entry, "dtype", json::Value::Kind::String, path, name).string;
  CRUMB_CHECK(dtype == "F32" || dtype == "F64" || dtype == "I64", path, ": tensor '", name, "' has dtype ", dtype,
              ", only F32, F64 (float64 models) and I64 (counters) are supported");
  t.dtype = dtype == "I64" ? DType::I64 : dtype == "F64" ? DType::F64 : DType::F32;
  uint64_t count = 1;
  for (const json::Value& item : field(entry, "shape", json::Value::Kind::Array, path, name).items) {
    const uint64_t d = item.integer;
    // Bounded by the file size: only a tensor that fits in the data section can be valid.
    CRUMB_CHECK(d == 0 || count <= data_size / d, path, ": tensor '", name, "' has a shape larger than the file");
    count *= d;
    t.dims.push_back(static_cast<int64_t>(d));
  }
  const std::vector<json::Value>& off = field(entry, "data_offsets", json::Value::Kind::Array, path, name).items;
  CRUMB_CHECK(off.size() == 2, path, ": tensor '", name, "': data_offsets must be [begin, end]");
  t.begin = off[0].integer;
  t.end = off[1].integer;
  CRUMB_CHECK(t.begin <= t.end && t.end <= data_size, path, ": tensor '", name, "': data_offsets [", t.begin, ", ",
              t.end, "] lie outside the data section of ", data_size, " bytes (truncated file?)");
  CRUMB_CHECK(t.end - t.begin == count * dtype_size(t.dtype), path, ": tensor '", name, "' of shape ",
              dims_str(t.dims), " needs ", count * dtype_size(t.dtype), " bytes but its data_offsets span ",
              t.end - t.begin);
  return t;
}

// The tensors must tile the data section exactly: no overlap, no gap, nothing left over.
void check_coverage(std::vector<const FileTensor*> ts, uint64_t data_size, const std::string& path) {
  std::sort(ts.begin(), ts.end(), [](const FileTensor* a, const FileTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const FileTensor* prev = nullptr;
  for (const FileTensor* t : ts) {
    CRUMB_CHECK(t->begin >= covered, path, ": tensors '", prev ? prev->name : "", "' and '", t->name,
                "' overlap in the data section");
    CRUMB_CHECK(t->begin == covered, path, ": ", t->begin - covered, " unused bytes before tensor '", t->name,
                "' in the data section");
    covered = t->end;
    prev = t;
  }
  CRUMB_CHECK(covered == data_size, path, ": data section has ", data_size, " bytes but the tensors cover ", covered);
}

// The metadata entry naming the save that wrote a model file and its optimizer file.
constexpr const char* kSaveIdKey = "save_id";

struct Metadata {
  std::vector<std::pair<std::string, std::string>> all;  // every entry, in file order
  std::string model;
  long long steps = 0;
  bool has_steps = false;  // "optimizer_steps" present (0 included: an optimizer that has not stepped yet)
  // Files without an "optimizer" entry (written before AdamW, or by other writers) hold SGD state.
  OptimizerKind optimizer = OptimizerKind::Sgd;
  bool names_optimizer = false;  // "optimizer" or "optimizer_steps" present
  // The save that wrote the file (save_id below), the same in a model file and its optimizer file: a pair
  // of one step count can still come from two saves (a run started afresh over an earlier run's file).
  // Empty in files written before it was recorded.
  std::string save_id;
};

Metadata parse_metadata(const json::Value& meta, const std::string& path) {
  CRUMB_CHECK(meta.kind == json::Value::Kind::Object, path, ": ", kMetadata, " must be an object");
  for (const auto& [k, v] : meta.members)
    CRUMB_CHECK(v.kind == json::Value::Kind::String, path, ": ", kMetadata, " value '", k, "' must be a string, found ",
                json::kind_name(v.kind));
  Metadata m;
  for (const auto& [k, v] : meta.members) m.all.push_back({k, v.string});
  if (const json::Value* model = meta.find("model")) m.model = model->string;
  if (const json::Value* kind = meta.find("optimizer")) {
    const std::string& k = kind->string;
    CRUMB_CHECK(k == "sgd" || k == "adamw", path, ": unknown optimizer \"", k, "\" in ", kMetadata,
                " (expected sgd or adamw)");
    m.optimizer = k == "sgd" ? OptimizerKind::Sgd : OptimizerKind::AdamW;
    m.names_optimizer = true;
  }
  if (const json::Value* steps = meta.find("optimizer_steps")) {
    const std::string& s = steps->string;
    const bool digits = !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    CRUMB_CHECK(digits, path, ": optimizer_steps \"", s, "\" is not a non-negative integer");
    m.steps = std::stoll(s);
    m.has_steps = true;
    m.names_optimizer = true;
  }
  if (const json::Value* id = meta.find(kSaveIdKey)) m.save_id = id->string;
  return m;
}

// A whole safetensors file, validated: header, metadata, tensors tiling the data section, data read.
struct TensorFile {
  std::string path;
  Metadata meta;
  std::vector<FileTensor> tensors;
  std::vector<char> data;
  const char* bytes(const FileTensor& t) const { return data.data() + t.begin; }
};

// with_data = false validates the layout and reads the header only (metadata lookups).
TensorFile read_tensor_file(const std::string& path, bool with_data = true) {
  TensorFile f;
  f.path = path;
  const InputFile file(path, "checkpoint " + path);
  const uint64_t size = file.size();
  CRUMB_CHECK(size >= 8, path, ": not a safetensors file: ", size, " bytes, shorter than the 8-byte header length");
  unsigned char len[8];
  file.read_at(len, 8, 0);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(len[i]) << (8 * i);
  CRUMB_CHECK(header_size <= size - 8, path, ": header length ", header_size, " exceeds the file size of ", size,
              " bytes (truncated or not a safetensors file)");
  CRUMB_CHECK(header_size <= kMaxHeaderBytes, path, ": header length ", header_size, " is more than the ",
              byte_limit_text(kMaxHeaderBytes), " a safetensors header may hold (damaged or not a safetensors file)");
  std::string header(header_size, '\0');
  file.read_at(header.data(), header.size(), 8);
  const json::Value root = json::parse(header, path + " header");
  CRUMB_CHECK(root.kind == json::Value::Kind::Object, path, ": header must be a JSON object, found ",
              json::kind_name(root.kind));
  const uint64_t data_start = 8 + header_size, data_size = size - data_start;
  for (const auto& [name, entry] : root.members) {
    if (name == kMetadata)
      f.meta = parse_metadata(entry, path);
    else
      f.tensors.push_back(parse_tensor(name, entry, data_size, path));
  }
  std::vector<const FileTensor*> all;
  for (const FileTensor& t : f.tensors) all.push_back(&t);
  check_coverage(all, data_size, path);
  if (with_data) {
    f.data.resize(data_size);
    file.read_at(f.data.data(), f.data.size(), data_start);
  }
  return f;
}

// The first non-finite element of T data, or -1: a checkpoint never holds NaN or infinity.
template <class T> int64_t first_nonfinite_of(const char* data, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes / sizeof(T); ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof v);
    if (!std::isfinite(v)) return static_cast<int64_t>(i);
  }
  return -1;
}
// The same for data of `dtype`; -1 for integers.
int64_t first_nonfinite(const char* data, std::size_t bytes, DType dtype) {
  if (dtype == DType::F32) return first_nonfinite_of<float>(data, bytes);
  if (dtype == DType::F64) return first_nonfinite_of<double>(data, bytes);
  return -1;
}

void check_finite(const Chunk& c, const std::string& path) {
  const int64_t i = first_nonfinite(c.data, c.bytes, c.dtype);
  CRUMB_CHECK(i < 0, "refusing to write checkpoint ", path, ": '", c.name, "' holds a non-finite value at element ", i,
              " (the run diverged; the previous checkpoint, if any, is left as it was)");
}

// Writes header and chunks to path atomically: a crash or a full disk never leaves a half-written file.
void write_tensor_file(const std::string& path, const std::vector<Chunk>& chunks,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::string header = header_json(chunks, metadata);
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::vector<std::string_view> pieces{{len, sizeof len}, header};
  for (const Chunk& c : chunks) pieces.emplace_back(c.data, c.bytes);
  write_file_atomically(path, pieces, "checkpoint");
}

// A float32 checkpoint loaded into a float64 model or the other way: the precision is what differs.
std::string precision_hint(DType file, DType model) {
  const bool floats = (file == DType::F32 || file == DType::F64) && (model == DType::F32 || model == DType::F64);
  if (!floats) return "";
  return file == DType::F64 ? " (the checkpoint holds float64 weights, from a --precision fp64 run: load it in one)"
                            : " (the checkpoint holds float32 weights: load it in a run of --precision fp32, tf32, "
                              "bf16 or fp16)";
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Where the weights of a failed save go: the temporary folder ($TMPDIR, else /tmp), else the save's own
// folder (the failure may have been the file's alone), else the current folder.
std::vector<std::string> rescue_folders(const std::string& save) {
  std::vector<std::string> dirs;
  auto add = [&](const std::string& d) {
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  };
  const char* tmp = std::getenv("TMPDIR");
  add(tmp && *tmp ? tmp : "/tmp");
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::absolute(save, ec).parent_path();
  if (!ec) add(folder.string());
  const std::filesystem::path here = std::filesystem::current_path(ec);
  if (!ec) add(here.string());
  return dirs;
}

}  // namespace

std::string optimizer_path(const std::string& path) { return path + ".optimizer"; }
std::string previous_optimizer_path(const std::string& path) { return optimizer_path(path) + ".prev"; }

bool has_optimizer_file(const std::string& path) {
  return exists(optimizer_path(path)) || exists(previous_optimizer_path(path));
}

namespace {
// What pairs a model file with an optimizer file: the step count and the save that each records; steps
// -1 where the file cannot be read (absent, damaged).
struct SaveMark {
  long long steps = -1;
  std::string save_id;
  bool operator==(const SaveMark& o) const { return steps == o.steps && save_id == o.save_id; }
  bool operator!=(const SaveMark& o) const { return !(*this == o); }
};
SaveMark mark_of(const Metadata& m) { return {m.steps, m.save_id}; }
SaveMark recorded_mark(const std::string& path) {
  if (!exists(path)) return {};
  try {
    return mark_of(read_tensor_file(path, false).meta);
  } catch (const Error&) {
    return {};
  }
}

// What names a save: a digest of the tensors it writes, model and optimizer state, and its step count.
// Two saves of one step count differ in it unless they wrote the same values (and pairing those is
// right), and the same run saves the same bytes (checkpoints stay reproducible byte for byte).
std::string save_id(const std::vector<Chunk>& model, const std::vector<Chunk>& state, long long steps) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(steps);
  auto mix = [&h](uint64_t v) {
    h = (h ^ v) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  };
  for (const std::vector<Chunk>* part : {&model, &state})
    for (const Chunk& c : *part) {
      std::size_t i = 0;
      for (; i + 8 <= c.bytes; i += 8) {
        uint64_t v;
        std::memcpy(&v, c.data + i, 8);
        mix(v);
      }
      uint64_t tail = 0;
      if (c.bytes > i) std::memcpy(&tail, c.data + i, c.bytes - i);
      mix(tail ^ (static_cast<uint64_t>(c.bytes) << 56));
    }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}
}  // namespace

void check_checkpoint_path(const std::string& path) {
  CRUMB_CHECK(!path.empty(), "checkpoint path is empty");
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  CRUMB_CHECK(!name.empty() && name != "." && name != "..", "cannot write checkpoint ", path,
              ": it names a folder, not a file");
  // The longest name written beside it: "<name>.optimizer.tmp.<pid>.<n>".
  CRUMB_CHECK(name.size() + 40 <= NAME_MAX, "cannot write checkpoint ", path, ": the file name is too long (",
              name.size(), " characters; at most ", NAME_MAX - 40, ")");
  const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
  struct stat st;
  CRUMB_CHECK(::stat(dir.c_str(), &st) == 0, "cannot write checkpoint ", path, ": folder ", dir, ": ",
              std::strerror(errno));
  CRUMB_CHECK(S_ISDIR(st.st_mode), "cannot write checkpoint ", path, ": ", dir, " is not a folder");
  CRUMB_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "cannot write checkpoint ", path, ": folder ", dir,
              " is not writable");
  for (const std::string& f : {path, optimizer_path(path)}) {
    if (::lstat(f.c_str(), &st) != 0) continue;
    CRUMB_CHECK(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode), "cannot write checkpoint ", path, ": ", f,
                S_ISDIR(st.st_mode) ? " is a folder" : " is not a regular file", "; it is never replaced");
  }
}

void save_checkpoint(const std::string& path, ParamStore& params, Optimizer* opt, const std::string& model_name,
                     const CheckpointMetadata& run) {
  check_master_dtype(path, params);
  check_checkpoint_path(path);
  params.to_host();
  if (opt) opt->to_host();
  const Graph& g = params.graph();
  std::vector<Chunk> chunks;
  for (ValueId p : params.params())
    chunks.push_back({g.value(p).name, params.dtype(), &g.value(p).dims, static_cast<const char*>(params.data(p)),
                      param_bytes(params, p)});
  for (ValueId v : g.states())
    chunks.push_back({g.value(v).name, g.value(v).dtype, &g.value(v).dims, static_cast<const char*>(params.state(v)),
                      value_bytes(g, v)});
  // Before either file is touched: a diverged model must not replace its optimizer's file either.
  for (const Chunk& c : chunks) check_finite(c, path);
  std::vector<Chunk> state;
  if (opt)
    for (const StateBlock& s : opt->state())
      for (ValueId p : params.params())
        state.push_back({kStatePrefix + s.name + "." + g.value(p).name, params.dtype(), &g.value(p).dims,
                         reinterpret_cast<const char*>(s.host()) + params.byte_offset(p), param_bytes(params, p)});
  std::vector<std::pair<std::string, std::string>> meta{{"format", "crumb"}, {"model", model_name}};
  if (opt) {
    meta.push_back({"optimizer", optimizer_name(opt->kind())});
    meta.push_back({"optimizer_steps", std::to_string(opt->steps())});
    meta.push_back({kSaveIdKey, save_id(chunks, state, opt->steps())});
  }
  meta.insert(meta.end(), run.begin(), run.end());
  if (opt) {
    for (const Chunk& c : state) check_finite(c, optimizer_path(path));
    // Two files cannot be replaced at once. The optimizer file that pairs with the model file on disk is
    // kept as <file>.optimizer.prev until the new pair is complete, so a crash or SIGKILL at any point
    // leaves a model file and an optimizer file of one save (loading takes whichever pairs).
    const SaveMark on_disk = recorded_mark(path);
    if (on_disk.steps >= 0 && recorded_mark(optimizer_path(path)) == on_disk)
      CRUMB_CHECK(::rename(optimizer_path(path).c_str(), previous_optimizer_path(path).c_str()) == 0, "cannot keep ",
                  optimizer_path(path), " as ", previous_optimizer_path(path), ": ", std::strerror(errno));
    write_tensor_file(optimizer_path(path), state, meta);
    write_tensor_file(path, chunks, meta);
  } else {
    for (const std::string& stale : {optimizer_path(path), previous_optimizer_path(path)})
      CRUMB_CHECK(!exists(stale) || ::unlink(stale.c_str()) == 0, "cannot remove the stale ", stale, ": ",
                  std::strerror(errno));
    write_tensor_file(path, chunks, meta);
  }
  // The new pair is complete: the previous optimizer file pairs with nothing now.
  if (exists(previous_optimizer_path(path))) ::unlink(previous_optimizer_path(path).c_str());
}

void save_checkpoint_or_rescue(const std::string& path, ParamStore& params, Optimizer* opt,
                               const std::string& model_name, const CheckpointMetadata& run) {
  try {
    save_checkpoint(path, params, opt, model_name, run);
  } catch (const Error& e) {
    std::string tried, why;
    for (const std::string& dir : rescue_folders(path)) {
      const std::string rescue = create_unique_file(dir, "crumb-rescue-", ".safetensors");
      if (rescue.empty()) {
        why = dir + ": " + std::strerror(errno);
      } else {
        bool saved = false;
        try {
          save_checkpoint(rescue, params, opt, model_name, run);
          saved = true;
        } catch (const Error& again) {
          ::unlink(rescue.c_str());
          ::unlink(optimizer_path(rescue).c_str());
          why = again.what();
        }
        if (saved)
          CRUMB_FAIL("the save failed: ", e.what(), "; the weights were saved to ", rescue,
                     " instead (--resume or --load it to continue)");
      }
      tried += (tried.empty() ? "" : ", ") + dir;
    }
    CRUMB_FAIL("the save failed: ", e.what(), "; the weights are lost: no copy could be written in ", tried,
               " either (", why, ")");
  }
}

CheckpointMetadata checkpoint_metadata(const std::string& path) { return read_tensor_file(path, false).meta.all; }

void load_checkpoint(const std::string& path, ParamStore& params, Optimizer* opt) {
  check_master_dtype(path, params);
  const TensorFile model = read_tensor_file(path);
  TensorFile optimizer;
  const bool sidecar = opt && has_optimizer_file(path);
  if (sidecar) {
    // The optimizer file of the model's save: <file>.optimizer, or the previous one a save was interrupted
    // before replacing (save_checkpoint).
    const SaveMark wanted = mark_of(model.meta);
    const bool current =
        recorded_mark(optimizer_path(path)) == wanted || recorded_mark(previous_optimizer_path(path)) != wanted;
    optimizer = read_tensor_file(current ? optimizer_path(path) : previous_optimizer_path(path));
    CRUMB_CHECK(optimizer.meta.names_optimizer && model.meta.names_optimizer && mark_of(optimizer.meta) == wanted &&
                    optimizer.meta.optimizer == model.meta.optimizer,
                optimizer.path, " does not belong to ", path, ": it holds ", optimizer_name(optimizer.meta.optimizer),
                " state after ", optimizer.meta.steps, " steps, the model file was saved after ", model.meta.steps,
                optimizer.meta.steps == model.meta.steps ? " by another save" : "",
                " (a save was interrupted: --resume with --fresh-optimizer starts the optimizer afresh)");
    for (const FileTensor& t : optimizer.tensors)
      CRUMB_CHECK(t.name.compare(0, kStatePrefix.size(), kStatePrefix) == 0, optimizer.path, ": tensor '", t.name,
                  "' is not optimizer state");
  }
  const Metadata& meta = sidecar ? optimizer.meta : model.meta;
  std::unordered_map<std::string, std::pair<const FileTensor*, const char*>> by_name;
  for (const TensorFile* f : {&model, static_cast<const TensorFile*>(&optimizer)})
    for (const FileTensor& t : f->tensors) {
      CRUMB_CHECK(by_name.emplace(t.name, std::make_pair(&t, f->bytes(t))).second, f->path, ": tensor '", t.name,
                  "' is also in ", model.path);
    }

  const std::string from = meta.model.empty() ? "" : " (checkpoint of model '" + meta.model + "')";
  const Graph& g = params.graph();
  std::unordered_map<std::string, ValueId> param_named;
  for (ValueId p : params.params()) param_named[g.value(p).name] = p;
  auto check_shape = [&](const FileTensor& t, ValueId p) {
    CRUMB_CHECK(t.dims == g.value(p).dims, path, ": tensor '", t.name, "' has shape ", dims_str(t.dims),
                " but the model expects ", dims_str(g.value(p).dims), from);
  };
  // Parameters (the master dtype) and non-trained state (its own dtype), by name, every one present.
  std::unordered_map<std::string, ValueId> state_named;
  for (ValueId v : g.states()) state_named[g.value(v).name] = v;
  for (const std::vector<ValueId>* values : {&params.params(), &g.states()})
    for (ValueId v : *values) {
      const auto it = by_name.find(g.value(v).name);
      CRUMB_CHECK(it != by_name.end(), path, ": ", g.value(v).kind == ValueKind::State ? "state" : "parameter", " '",
                  g.value(v).name, "' ", dims_str(g.value(v).dims), " is missing", from);
      const FileTensor& t = *it->second.first;
      check_shape(t, v);
      const DType want = g.value(v).kind == ValueKind::State ? g.value(v).dtype : params.dtype();
      CRUMB_CHECK(t.dtype == want, path, ": tensor '", t.name, "' is ", dtype_name(t.dtype), " but the model's is ",
                  dtype_name(want), from, precision_hint(t.dtype, want));
    }
  // Optimizer state: "optimizer.<state>.<param>", every parameter or none for each state name.
  const std::vector<std::string>& known_state = state_names(meta.optimizer);
  std::unordered_map<std::string, std::size_t> state_found;
  for (const TensorFile* f : {&model, static_cast<const TensorFile*>(&optimizer)})
    for (const FileTensor& t : f->tensors) {  // in file order, so the first problem is always the one named
    const std::string& name = t.name;
    const bool is_state = name.compare(0, kStatePrefix.size(), kStatePrefix) == 0;
    std::string param_name = name;
    if (is_state) {
      const std::size_t dot = name.find('.', kStatePrefix.size());
      const std::string state = name.substr(kStatePrefix.size(), dot - kStatePrefix.size());
      CRUMB_CHECK(dot != std::string::npos &&
                      std::find(known_state.begin(), known_state.end(), state) != known_state.end(),
                  path, ": unknown tensor '", name, "' ", dims_str(t.dims), " is no state of optimizer ",
                  optimizer_name(meta.optimizer), from);
      param_name = name.substr(dot + 1);
      ++state_found[state];
    }
    if (!is_state && state_named.count(name)) continue;
    const auto it = param_named.find(param_name);
    CRUMB_CHECK(it != param_named.end(), path, ": unknown tensor '", name, "' ", dims_str(t.dims),
                " is not a parameter or state of this model", from);
    if (is_state) {
      check_shape(t, it->second);
      CRUMB_CHECK(t.dtype == params.dtype(), path, ": optimizer state '", name, "' is ", dtype_name(t.dtype),
                  " but the model's parameters are ", dtype_name(params.dtype()), from,
                  precision_hint(t.dtype, params.dtype()));
    }
    }
  for (const auto& [state, found] : state_found)
    for (ValueId p : params.params())
      CRUMB_CHECK(by_name.count(kStatePrefix + state + "." + g.value(p).name), path, ": optimizer ", state,
                  " of parameter '", g.value(p).name, "' is missing while others are present");
  const bool has_state = !state_found.empty();
  // The optimizer is restored from its own file, or from the tensors of a file written before that
  // file existed; otherwise it starts afresh (a weights-only file, such as one saved by PyTorch).
  const bool restore = opt && (sidecar || has_state);
  if (restore) {
    CRUMB_CHECK(opt->kind() == meta.optimizer, path, ": holds the state of optimizer ", optimizer_name(meta.optimizer),
                " but this run uses ", optimizer_name(opt->kind()), " (pass --optimizer ",
                optimizer_name(meta.optimizer), " to resume it)");
    if (has_state)
      for (const StateBlock& s : opt->state())
        CRUMB_CHECK(state_found.count(s.name), path, ": optimizer state '", s.name, "' is missing while ",
                    state_found.begin()->first, " is present");
  }

  for (const auto& [name, entry] : by_name) {
    const int64_t i = first_nonfinite(entry.second, entry.first->end - entry.first->begin, entry.first->dtype);
    CRUMB_CHECK(i < 0, path, ": tensor '", name, "' holds a non-finite value at element ", i,
                " (saved from a diverged run?)", from);
  }
  // Everything was read and checked before anything is written, so a failed load leaves the model as it was.
  for (ValueId p : params.params()) std::memcpy(params.data(p), by_name[g.value(p).name].second, param_bytes(params, p));
  for (ValueId v : g.states()) std::memcpy(params.state(v), by_name[g.value(v).name].second, value_bytes(g, v));
  params.to_device();
  if (!opt) return;
  // State without a step count (a file from another writer) is still a started optimizer: with 0 steps
  // SGD's first step would overwrite the loaded momentum with the gradient. A recorded count is taken as it
  // is, 0 included (an fp16 run whose every step was skipped): its schedule and bias corrections start there.
  opt->set_steps(!restore ? 0 : has_state && !meta.has_steps ? std::max(meta.steps, 1LL) : meta.steps);
  for (const StateBlock& s : opt->state()) {
    char* block = reinterpret_cast<char*>(s.host());
    if (!has_state) {
      std::memset(block, 0, s.block.size());
      continue;
    }
    for (ValueId p : params.params())
      std::memcpy(block + params.byte_offset(p), by_name[kStatePrefix + s.name + "." + g.value(p).name].second,
                  param_bytes(params, p));
  }
  opt->to_device();
}

}  // namespace crumb
