#include "tools/bench/kernels/cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "engine/base/error.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/device/backend.h"
#include "engine/graph/op.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "kernels/cuda/check.h"
#include "tools/bench/kernels/report.h"
#if CRUMB_HAVE_CUDNN
#include "kernels/cuda/cudnn_descriptors.h"
#endif

namespace crumb::bench {
namespace {

using cuda::CudaBackend;

// The denominators: NVIDIA's H100 SXM5 datasheet (dense figures; the datasheet's TF32 989 TFLOPS is
// with 2:4 sparsity, half of it dense). Whatever GPU runs, the percentages are of an H100 SXM5.
constexpr double kH100Fp32 = 67e12;       // FP32 (CUDA cores)
constexpr double kH100Tf32 = 494.7e12;    // TF32 tensor cores, dense
constexpr double kH100Bytes = 3.35e12;    // HBM3

// Device memory of one benchmark, filled like the CPU operands (cases.h), freed with it.
class DeviceOperands {
 public:
  DeviceOperands() = default;
  DeviceOperands(const DeviceOperands&) = delete;
  DeviceOperands& operator=(const DeviceOperands&) = delete;
  ~DeviceOperands() {
    for (void* p : owned_) cudaFree(p);
  }
  float* floats(int64_t count) {
    std::vector<float> host(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = operand_value(i);
    float* p = zeros<float>(count);
    CRUMB_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return p;
  }
  template <class T> T* zeros(int64_t count) { return static_cast<T*>(bytes(static_cast<std::size_t>(count) * sizeof(T))); }
  void* bytes(std::size_t n) {
    void* p = nullptr;
    CRUMB_CUDA_CHECK(cudaMalloc(&p, n == 0 ? 1 : n));
    owned_.push_back(p);
    CRUMB_CUDA_CHECK(cudaMemset(p, 0, n));
    return p;
  }

 private:
  std::vector<void*> owned_;
};

// This GPU's own ceilings, measured once before the benchmarks (the "% of the measured peak"; the
// datasheet figures above are an upper bound no kernel reaches): the best of a few square cuBLAS GEMMs,
// FP32 and TF32, and a device-to-device copy, which reads and writes every byte (both Peaks hold it).
struct MeasuredPeaks {
  Peak fp32, tf32;
};

// Device time of one call between two events on `stream`: without the host's launch overhead where
// launches run ahead.
class EventTimer {
 public:
  EventTimer() {
    CRUMB_CUDA_CHECK(cudaEventCreate(&start_));
    CRUMB_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  double seconds(cudaStream_t stream, const std::function<void()>& call) {
    CRUMB_CUDA_CHECK(cudaEventRecord(start_, stream));
    call();
    CRUMB_CUDA_CHECK(cudaEventRecord(stop_, stream));
    CRUMB_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CRUMB_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms / 1e3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Seconds of the best of `reps` calls, after one to warm up (clocks, lazy loading, cuBLAS's heuristics).
double best_seconds(cudaStream_t stream, int reps, const std::function<void()>& call) {
  EventTimer timer;
  call();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, timer.seconds(stream, call));
  return best;
}

MeasuredPeaks measure_peaks(CudaBackend& gpu) {
  constexpr int kN = 8192;                   // 1.1 TFLOP per GEMM: tens of milliseconds on an H100
  constexpr std::size_t kCopy = 1ull << 30;  // well past the 50 MB L2
  DeviceOperands ops;
  const float* a = ops.floats(int64_t{kN} * kN);
  const float* b = ops.floats(int64_t{kN} * kN);
  float* c = ops.zeros<float>(int64_t{kN} * kN);
  const cublasHandle_t h = gpu.blas();
  const float one = 1, zero = 0;
  const auto gemm = [&](cublasComputeType_t math) {
    return [=] {
      CRUMB_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, a, CUDA_R_32F, kN, b, CUDA_R_32F,
                                      kN, &zero, c, CUDA_R_32F, kN, math, CUBLAS_GEMM_DEFAULT));
    };
  };
  const double flops = 2.0 * kN * kN * kN;
  const double fp32 = flops / best_seconds(gpu.compute(), 3, gemm(CUBLAS_COMPUTE_32F));
  const double tf32 = flops / best_seconds(gpu.compute(), 5, gemm(CUBLAS_COMPUTE_32F_FAST_TF32));
  void* src = ops.bytes(kCopy);
  void* dst = ops.bytes(kCopy);
  const double bytes = 2.0 * kCopy / best_seconds(gpu.compute(), 5, [&] {
                         CRUMB_CUDA_CHECK(cudaMemcpyAsync(dst, src, kCopy, cudaMemcpyDeviceToDevice, gpu.compute()));
                       });
  return {{fp32, bytes}, {tf32, bytes}};
}

// One implementation's call, ready to time, with what it reports besides its time.
struct Prepared {
  std::function<void()> call;
  bool tf32 = false;          // runs on tensor cores: judged against the TF32 peak
  std::size_t workspace = 0;  // bytes of scratch the call uses
  int algo = -1;              // cuDNN's algorithm enum value, for the library's convolutions
};

using Prepare = Prepared (*)(const Case&, CudaBackend&, DeviceOperands&);

struct Impl {
  const char* name;
  Prepare prepare;
};

const Node& node_of(const Case& c) { return c.graph->node(c.node); }

// ---- Crumb's own CUDA path: the engine's CUDA row (or optimizer pass), as a training step runs it.
Prepared crumb(const Case& c, CudaBackend& gpu, DeviceOperands&) {
  auto call = std::make_shared<EngineCall>(c, gpu);
  return {[call] { call->run(); }, false, call->workspace_bytes()};
}

// ---- cuBLAS alone: the linear layer's GEMM as one cublasGemmEx (no bias pass), FP32 or TF32. Row-major
// [r, c] is column-major [c, r], so y = x w^T is y^T = w x^T in cuBLAS's terms.
template <bool Tf32> Prepared cublas(const Case& c, CudaBackend& gpu, DeviceOperands& ops) {
  const Node& node = node_of(c);
  const LinearGeometry& g = crumb::ops::geometry<LinearGeometry>(node);
  const struct {
    int n, in, out;
  } s{c.batch, g.in, g.out};
  float* x = ops.floats(int64_t(s.n) * s.in);
  float* y = ops.floats(int64_t(s.n) * s.out);
  float* w = ops.floats(int64_t(s.out) * s.in);
  const cublasHandle_t h = gpu.blas();
  const cublasComputeType_t math = Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const auto gemm = [=](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda,
                        const float* b, int ldb, float* out, int ldc) {
    const float one = 1, zero = 0;
    CRUMB_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, &zero, out,
                                    CUDA_R_32F, ldc, math, CUBLAS_GEMM_DEFAULT));
  };
  Prepared p{{}, Tf32};
  if (node.def == &kLinear) {  // y^T [out, n] = w [out, in] x^T [in, n]
    p.call = [=] { gemm(CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.n, s.in, w, s.in, x, s.in, y, s.out); };
  } else if (node.def == &kLinearBwdData) {  // dx^T [in, n] = w^T [in, out] dy^T [out, n]
    p.call = [=] { gemm(CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.n, s.out, w, s.in, y, s.out, x, s.in); };
  } else {  // dw^T [in, out] = x^T [in, n] dy [n, out]
    p.call = [=] { gemm(CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.n, x, s.in, y, s.out, w, s.in); };
  }
  return p;
}

#if CRUMB_HAVE_CUDNN
using TensorDesc = std::shared_ptr<cuda::detail::TensorDescriptor>;

TensorDesc nchw(int n, int c, int h, int w) {
  auto d = std::make_shared<cuda::detail::TensorDescriptor>();
  cuda::detail::set_image(*d, n, c, h, w);
  return d;
}

// ---- cuDNN's fastest algorithm for the pass by its own exhaustive search (cudnnFind*AlgorithmEx, which
// runs each candidate), within the engine's workspace limit; FMA math only, or tensor-op (TF32) allowed.
template <bool Tf32> Prepared cudnn_find(const Case& c, CudaBackend& gpu, DeviceOperands& ops) {
  const Node& node = node_of(c);
  const cpu::Conv2dShape s = crumb::ops::at_batch<cpu::Conv2dShape>(node, c.batch);
  // The bias of the layer: the forward adds it, the weight pass sums its gradient.
  const bool bias = node.def == &kConv2d ? node.in.size() == 3 : node.def == &kConv2dBwdWeight && node.out.size() == 2;
  const cudnnHandle_t dnn = gpu.dnn();
  const TensorDesc xd = nchw(s.n, s.c_in, s.h, s.w), yd = nchw(s.n, s.c_out, s.h_out, s.w_out),
                   bd = nchw(1, s.c_out, 1, 1);
  auto wd = std::make_shared<cuda::detail::FilterDescriptor>();
  auto cd = std::make_shared<cuda::detail::ConvolutionDescriptor>();
  CRUMB_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(wd->get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.c_out, s.c_in, s.kh, s.kw));
  CRUMB_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd->get(), s.pad_h, s.pad_w, s.stride_h, s.stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CRUMB_CUDNN_CHECK(cudnnSetConvolutionMathType(cd->get(), Tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  const std::size_t limit = CudaBackend::kConvWorkspaceLimit;
  void* ws = ops.bytes(limit);
  float* x = ops.floats(s.in_count());
  float* y = ops.floats(s.out_count());
  float* w = ops.floats(int64_t(s.c_out) * s.c_in * s.kh * s.kw);
  float* b = bias ? ops.floats(s.c_out) : nullptr;
  const float one = 1, zero = 0;
  Prepared p{{}, Tf32};
  // The first result that ran: cuDNN sorts them by its measured time.
  const auto pick = [&](const auto* perf, int count) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      CRUMB_CUDNN_CHECK(cudnnSetConvolutionMathType(cd->get(), perf[i].mathType));
      p.workspace = perf[i].memory;
      p.algo = static_cast<int>(perf[i].algo);
      return perf[i].algo;
    }
    CRUMB_FAIL(c.name(), ": cuDNN found no algorithm within ", limit, " bytes of workspace");
  };
  int count = 0;
  if (node.def == &kConv2d) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CRUMB_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(dnn, xd->get(), x, wd->get(), w, cd->get(), yd->get(), y,
                                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf, ws, limit));
    const cudnnConvolutionFwdAlgo_t algo = pick(perf, count);
    const std::size_t bytes = p.workspace;
    p.call = [=] {
      CRUMB_CUDNN_CHECK(cudnnConvolutionForward(dnn, &one, xd->get(), x, wd->get(), w, cd->get(), algo, ws, bytes,
                                                &zero, yd->get(), y));
      if (b) CRUMB_CUDNN_CHECK(cudnnAddTensor(dnn, &one, bd->get(), b, &one, yd->get(), y));
    };
  } else if (node.def == &kConv2dBwdData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CRUMB_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(dnn, wd->get(), w, yd->get(), y, cd->get(),
                                                                  xd->get(), x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                                  &count, perf, ws, limit));
    const cudnnConvolutionBwdDataAlgo_t algo = pick(perf, count);
    const std::size_t bytes = p.workspace;
    p.call = [=] {
      CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardData(dnn, &one, wd->get(), w, yd->get(), y, cd->get(), algo, ws, bytes,
                                                     &zero, xd->get(), x));
    };
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CRUMB_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        dnn, xd->get(), x, yd->get(), y, cd->get(), wd->get(), w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
        perf, ws, limit));
    const cudnnConvolutionBwdFilterAlgo_t algo = pick(perf, count);
    const std::size_t bytes = p.workspace;
    p.call = [=] {
      CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dnn, &one, xd->get(), x, yd->get(), y, cd->get(), algo, ws,
                                                       bytes, &zero, wd->get(), w));
      if (b) CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardBias(dnn, &one, yd->get(), y, &zero, bd->get(), b));
    };
  }
  return p;
}

using PoolingDesc = cuda::detail::Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                             cudnnDestroyPoolingDescriptor>;
using ActivationDesc = cuda::detail::Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                                cudnnDestroyActivationDescriptor>;

// ---- cuDNN's pooling, the same windows (average counting the padding, as Crumb's does).
Prepared cudnn_pool(const Case& c, CudaBackend& gpu, DeviceOperands& ops) {
  const Node& node = node_of(c);
  const cpu::Pool2dShape s = crumb::ops::at_batch<cpu::Pool2dShape>(node, c.batch);
  const bool max = node.def == &kMaxPool2d || node.def == &kMaxPool2dBwd;
  auto pd = std::make_shared<PoolingDesc>();
  CRUMB_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
      pd->get(), max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN, s.kh,
      s.kw, s.pad_h, s.pad_w, s.stride_h, s.stride_w));
  const TensorDesc xd = nchw(s.n, s.c, s.h, s.w), yd = nchw(s.n, s.c, s.h_out, s.w_out);
  const int64_t in = int64_t(s.n) * s.c * s.h * s.w, out = int64_t(s.n) * s.c * s.h_out * s.w_out;
  float* x = ops.floats(in);
  float* dx = ops.floats(in);
  float* y = ops.floats(out);
  float* dy = ops.floats(out);
  const cudnnHandle_t dnn = gpu.dnn();
  const float one = 1, zero = 0;
  auto forward = [=] {
    CRUMB_CUDNN_CHECK(cudnnPoolingForward(dnn, pd->get(), &one, xd->get(), x, &zero, yd->get(), y));
  };
  forward();
  if (node.def == &kMaxPool2d || node.def == &kAvgPool2d) return {forward};
  return {[=] {
    CRUMB_CUDNN_CHECK(cudnnPoolingBackward(dnn, pd->get(), &one, yd->get(), y, yd->get(), dy, xd->get(), x, &zero,
                                           xd->get(), dx));
  }};
}

// ---- cuDNN's ReLU.
Prepared cudnn_relu(const Case& c, CudaBackend& gpu, DeviceOperands& ops) {
  const Node& node = node_of(c);
  const int64_t n = c.graph->value(node.out[0]).count(c.batch);
  CRUMB_CHECK(n <= INT32_MAX, c.name(), ": too many elements for one cuDNN tensor");
  auto ad = std::make_shared<ActivationDesc>();
  CRUMB_CUDNN_CHECK(cudnnSetActivationDescriptor(ad->get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  const TensorDesc d = nchw(1, 1, 1, static_cast<int>(n));
  float* x = ops.floats(n);
  float* y = ops.floats(n);
  float* dy = ops.floats(n);
  float* dx = ops.floats(n);
  const cudnnHandle_t dnn = gpu.dnn();
  const float one = 1, zero = 0;
  if (node.def == &kRelu)
    return {[=] { CRUMB_CUDNN_CHECK(cudnnActivationForward(dnn, ad->get(), &one, d->get(), x, &zero, d->get(), y)); }};
  return {[=] {
    CRUMB_CUDNN_CHECK(cudnnActivationBackward(dnn, ad->get(), &one, d->get(), y, d->get(), dy, d->get(), x, &zero,
                                              d->get(), dx));
  }};
}

// ---- cuDNN's spatial BatchNorm (statistics over the whole batch: the same work as Crumb's when one
// group holds the batch, which is when it is registered).
cpu::BatchNormShape batch_norm_shape(const Case& c) {
  cpu::BatchNormShape s = crumb::ops::at_batch<cpu::BatchNormShape>(node_of(c), c.batch);
  if (s.group == 0) s.group = c.batch;  // the whole micro-batch is one group
  return s;
}

bool one_group(const Case& c) { return batch_norm_shape(c).groups() == 1; }

Prepared cudnn_batch_norm(const Case& c, CudaBackend& gpu, DeviceOperands& ops) {
  const cpu::BatchNormShape s = batch_norm_shape(c);
  const int64_t count = int64_t(s.n) * s.c * s.hw;
  const TensorDesc xd = nchw(s.n, s.c, s.hw, 1), pd = nchw(1, s.c, 1, 1);
  float* x = ops.floats(count);
  float* y = ops.floats(count);
  float* dx = ops.floats(count);
  float* w = ops.floats(s.c);
  float* b = ops.floats(s.c);
  float* dw = ops.floats(s.c);
  float* db = ops.floats(s.c);
  float* running_mean = ops.zeros<float>(s.c);
  float* running_var = ops.floats(s.c);
  float* mean = ops.zeros<float>(s.c);
  float* invstd = ops.zeros<float>(s.c);
  const cudnnHandle_t dnn = gpu.dnn();
  const float one = 1, zero = 0;
  const double eps = 1e-5;
  auto forward = [=] {
    CRUMB_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd->get(), x,
                                                             xd->get(), y, pd->get(), w, b, 0.1, running_mean,
                                                             running_var, eps, mean, invstd));
  };
  forward();
  if (node_of(c).def == &kBatchNorm) return {forward};
  return {[=] {
    CRUMB_CUDNN_CHECK(cudnnBatchNormalizationBackward(dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                                      xd->get(), x, xd->get(), y, xd->get(), dx, pd->get(), w, dw, db,
                                                      eps, mean, invstd));
  }};
}
#endif  // CRUMB_HAVE_CUDNN

// The libraries' implementations of the same work as some engine rows, run beside them where `applies`.
struct Library {
  std::vector<const OpDef*> ops;
  std::vector<Impl> impls;
  bool (*applies)(const Case&);
};

bool always(const Case&) { return true; }

const std::vector<Library>& libraries() {
  static const std::vector<Library> all = {
      {{&kLinear, &kLinearBwdData, &kLinearBwdWeight},
       {{"cublas", cublas<false>}, {"cublas_tf32", cublas<true>}},
       always},
#if CRUMB_HAVE_CUDNN
      {{&kConv2d, &kConv2dBwdData, &kConv2dBwdWeight},
       {{"cudnn_find", cudnn_find<false>}, {"cudnn_find_tf32", cudnn_find<true>}},
       always},
      {{&kMaxPool2d, &kMaxPool2dBwd, &kAvgPool2d, &kAvgPool2dBwd}, {{"cudnn", cudnn_pool}}, always},
      {{&kRelu, &kReluBwd}, {{"cudnn", cudnn_relu}}, always},
      {{&kBatchNorm, &kBatchNormBwd}, {{"cudnn", cudnn_batch_norm}}, one_group},
#endif
  };
  return all;
}

// The implementations a case runs on the GPU: Crumb's first, then the libraries' for the same work.
std::vector<Impl> impls(const Case& c) {
  std::vector<Impl> out{{"crumb", crumb}};
  if (!c.graph) return out;
  for (const Library& lib : libraries()) {
    if (std::find(lib.ops.begin(), lib.ops.end(), node_of(c).def) == lib.ops.end() || !lib.applies(c)) continue;
    out.insert(out.end(), lib.impls.begin(), lib.impls.end());
  }
  return out;
}

// Times each call on the GPU (EventTimer).
void run(benchmark::State& state, const Case& c, Prepare prepare, MeasuredPeaks measured) try {
  CudaBackend& gpu = CudaBackend::of(backend(Device::CUDA, 0));
  gpu.activate();
  DeviceOperands ops;
  const Prepared p = prepare(c, gpu, ops);
  EventTimer timer;
  p.call();  // warm-up: lazy module loading and library plans are not the kernel's time
  CRUMB_CUDA_CHECK(cudaStreamSynchronize(gpu.compute()));
  for (auto _ : state) state.SetIterationTime(timer.seconds(gpu.compute(), p.call));
  report(state, c, {p.tf32 ? kH100Tf32 : kH100Fp32, kH100Bytes}, 1e12);
  state.counters["pct_measured"] = pct_of(state, c, p.tf32 ? measured.tf32 : measured.fp32);
  state.counters["workspace_bytes"] = static_cast<double>(p.workspace);
  if (p.algo >= 0) state.counters["algo"] = p.algo;
} catch (const std::exception& e) {
  // One case the library refuses (a shape, an algorithm) ends that benchmark, not the suite.
  state.SkipWithError(e.what());
}

}  // namespace

bool register_cuda(const std::vector<Case>& cases) {
  if (!device_available(Device::CUDA)) {
    std::fprintf(stderr, "cuda: skipped (no usable CUDA device)\n");
    return false;
  }
  benchmark::AddCustomContext("cuda_device", backend(Device::CUDA, 0).description());
  benchmark::AddCustomContext("cuda_peak_source", "NVIDIA H100 SXM5 datasheet, dense: FP32 67 TFLOP/s, TF32 tensor "
                                                  "cores 494.7 TFLOP/s (989 with sparsity), HBM3 3.35 TB/s");
  const MeasuredPeaks measured = measure_peaks(CudaBackend::of(backend(Device::CUDA, 0)));
  benchmark::AddCustomContext("cuda_measured_fp32_TFLOP/s", std::to_string(measured.fp32.flops / 1e12));
  benchmark::AddCustomContext("cuda_measured_tf32_TFLOP/s", std::to_string(measured.tf32.flops / 1e12));
  benchmark::AddCustomContext("cuda_measured_GB/s", std::to_string(measured.fp32.bytes / 1e9));
  benchmark::AddCustomContext("cuda_measured_source", "best of 3-5: cublasGemmEx 8192^3 FP32 and TF32 "
                                                      "(CUBLAS_COMPUTE_32F[_FAST_TF32]); a 1 GiB device-to-device "
                                                      "copy counted as read + write; pct_measured is of these");
  std::fprintf(stderr, "CUDA ceilings: GEMM FP32 %.1f TFLOP/s, TF32 %.1f TFLOP/s, copy %.0f GB/s\n",
               measured.fp32.flops / 1e12, measured.tf32.flops / 1e12, measured.fp32.bytes / 1e9);
  for (const Case& c : cases) {
    // The CUDA backend has no row for some ops in some builds (convolutions without cuDNN).
    if (c.graph && !impl_table().find(*node_of(c).def, Device::CUDA, c.graph->float_dtype())) continue;
    for (const Impl& impl : impls(c)) {
      benchmark::RegisterBenchmark(("cuda/" + c.name() + "/" + impl.name).c_str(), run, c, impl.prepare, measured)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}

}  // namespace crumb::bench
