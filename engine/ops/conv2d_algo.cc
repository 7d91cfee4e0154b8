#include "engine/ops/conv2d_algo.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/ops/conv2d.h"
#include "kernels/conv2d.h"

namespace crumb {
namespace {

// Samples a measurement runs, whatever the plan's batch (the choice must not depend on it), and rounds,
// each timing both algorithms one after the other; the best of each counts.
constexpr int kProbeSamples = 8, kRounds = 3;

std::string key(const cpu::Conv2dShape& s, ConvAlgoPass pass, DType dtype) {
  std::ostringstream o;
  o << (pass == ConvAlgoPass::Forward ? "forward" : "data") << ":" << s.c_in << "x" << s.h << "x" << s.w << ">"
    << s.c_out << ":p" << s.pad_h << "x" << s.pad_w << ":" << dtype_name(dtype);
  return o.str();
}

// The measured choices of this process, by key.
std::mutex& memo_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, bool>& memo() {
  static std::map<std::string, bool> m;
  return m;
}

// Values in [-0.5, 0.5), no denormals or NaN, the same in every run.
template <class T> std::vector<T> operand(std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<T>((i * 7919 % 1000) / 1000.0 - 0.5);
  return v;
}

template <class T> bool winograd_is_faster(const cpu::Conv2dShape& one, ConvAlgoPass pass) {
  cpu::Conv2dShape s = one;
  s.n = kProbeSamples;
  const bool fwd = pass == ConvAlgoPass::Forward;
  std::vector<T> x = operand<T>(s.in_count()), y = operand<T>(s.out_count());
  const std::vector<T> w = operand<T>(std::size_t{9} * s.c_in * s.c_out), b = operand<T>(s.c_out);
  std::vector<T> ws(std::max(fwd ? cpu::conv2d_forward_workspace(s) : cpu::conv2d_backward_data_workspace(s),
                             fwd ? cpu::winograd_forward_workspace(s) : cpu::winograd_backward_data_workspace(s)));
  auto run = [&](bool winograd) {
    if (fwd && winograd) cpu::winograd_forward(y.data(), x.data(), w.data(), b.data(), s, ws.data());
    if (fwd && !winograd) cpu::conv2d_forward(y.data(), x.data(), w.data(), b.data(), s, ws.data());
    if (!fwd && winograd) cpu::winograd_backward_data(x.data(), y.data(), w.data(), s, ws.data(), false);
    if (!fwd && !winograd) cpu::conv2d_backward_data(x.data(), y.data(), w.data(), s, ws.data(), false);
  };
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  run(false);  // first touches of the buffers
  for (int round = 0; round < kRounds; ++round)
    for (int winograd : {0, 1}) {
      const auto start = std::chrono::steady_clock::now();
      run(winograd);
      best[winograd] = std::min(best[winograd], std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  return best[1] < best[0];
}

bool applies(const cpu::Conv2dShape& s) { return cpu::conv2d_winograd_applies(s); }

// The conv nodes of g whose pass is chosen, with their pass.
template <class F> void for_each_choice(const Graph& g, F&& f) {
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.def != &kConv2d && n.def != &kConv2dBwdData) continue;
    const auto& s = ops::geometry<cpu::Conv2dShape>(n);
    if (applies(s)) f(s, n.def == &kConv2d ? ConvAlgoPass::Forward : ConvAlgoPass::Data);
  }
}

}  // namespace

bool conv_runs_winograd(const Graph& g, const cpu::Conv2dShape& s, ConvAlgoPass pass) {
  if (!applies(s)) return false;
  switch (g.conv_algo()) {
    case Graph::ConvAlgo::Direct: return false;
    case Graph::ConvAlgo::Winograd: return true;
    case Graph::ConvAlgo::Measure: break;
  }
  const std::string k = key(s, pass, g.master_dtype());
  std::lock_guard<std::mutex> lock(memo_mutex());
  auto recorded = g.kernel_choices().find(k);
  if (recorded != g.kernel_choices().end()) return memo()[k] = recorded->second == "winograd";
  auto known = memo().find(k);
  if (known != memo().end()) return known->second;
  const bool faster = g.master_dtype() == DType::F64 ? winograd_is_faster<double>(s, pass)
                                                     : winograd_is_faster<float>(s, pass);
  return memo()[k] = faster;
}

std::string conv_choices_text(const Graph& g) {
  if (g.conv_algo() != Graph::ConvAlgo::Measure) return "";
  std::set<std::string> entries;
  std::lock_guard<std::mutex> lock(memo_mutex());
  for_each_choice(g, [&](const cpu::Conv2dShape& s, ConvAlgoPass pass) {
    const std::string k = key(s, pass, g.master_dtype());
    auto known = memo().find(k);
    if (known != memo().end()) entries.insert(k + (known->second ? "=winograd" : "=direct"));
  });
  std::string text;
  for (const std::string& e : entries) text += (text.empty() ? "" : ";") + e;
  return text;
}

void set_conv_choices(Graph& g, const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string entry;
  while (std::getline(in, entry, ';')) {
    const std::size_t eq = entry.find('=');
    const std::string choice = eq == std::string::npos ? "" : entry.substr(eq + 1);
    CRUMB_CHECK(eq != std::string::npos && eq > 0 && (choice == "winograd" || choice == "direct"), source,
                ": convolution algorithm record '", entry,
                "' is not <layer key>=winograd|direct; the file is damaged, or written by another program");
    g.set_kernel_choice(entry.substr(0, eq), choice);
  }
}

}  // namespace crumb
