#!/usr/bin/env python3
"""CTest KernelsBenchCases: the benchmark list (kernels_bench at argv[1], --benchmark_list_tests) covers
every op a training step runs and every suite, and follows the graphs: a first convolution has no data
gradient, ResNet-50's repeated bottleneck shapes are listed once, vgg11_bn's norm layers, adaptive pool
and dropout are taken from the registry's model, average pooling stands in at the max pools; the work
model counts a convolution's FLOPs and a ReLU's bytes."""
import json
import os
import re
import subprocess
import sys

# The engine's ops (OpDef::name) of the reference models' training graphs and of the op test cases
# (batch_norm_apply: BatchNorm recomputed in the backward pass; to_nhwc, to_nchw: the channels-last cases'
# conversions; the fused normalisation ops of the fusion cases; cast: the bf16 suite's input converted from
# float32), and the optimizer's passes.
OPS = """conv2d conv2d_backward_data conv2d_backward_weight linear linear_backward_data linear_backward_weight
max_pool2d max_pool2d_backward avg_pool2d avg_pool2d_backward global_avg_pool global_avg_pool_backward
adaptive_avg_pool2d adaptive_avg_pool2d_backward batch_norm batch_norm_backward group_norm group_norm_backward
batch_norm_apply batch_norm_relu batch_norm_relu_backward batch_norm_add_relu batch_norm_add_relu_backward
batch_norm_apply_relu group_norm_relu group_norm_relu_backward group_norm_add_relu group_norm_add_relu_backward
relu relu_backward dropout dropout_backward add softmax_cross_entropy softmax_cross_entropy_backward
leaky_relu leaky_relu_backward hardtanh hardtanh_backward to_nhwc to_nchw cast sgd_momentum_step adamw_step
count_nonfinite""".split()
SUITES = "lenet5 cnn mlp resnet20 resnet20_28 resnet20_28_bf16 resnet18_28 resnet50_224 vgg11_bn_32 vgg11_bn_224 deepbench op_cases".split()


def main():
    listed = subprocess.run([sys.argv[1], "--device=cpu", "--ceiling_seconds=0", "--benchmark_list_tests=true"],
                            check=True, capture_output=True, text=True).stdout.split()
    names = [re.sub(r"/real_time$", "", n) for n in listed]
    assert len(names) == len(set(names)), "a benchmark is listed twice"
    parts = [n.split("/") for n in names]
    assert all(len(p) == 4 and p[0] == "cpu" for p in parts), "names are cpu/op/suite/layer"
    missing = set(OPS) - {p[1] for p in parts}
    assert not missing, f"ops without a benchmark: {sorted(missing)}"
    unknown = {p[1] for p in parts} - set(OPS)
    assert not unknown, f"ops the list above lacks: {sorted(unknown)}"
    missing = set(SUITES) - {p[2] for p in parts}
    assert not missing, f"suites without a benchmark: {sorted(missing)}"
    # The graphs' first convolutions take the input images, which need no gradient.
    for first in ("lenet5/0", "cnn/0", "resnet50_224/conv1", "vgg11_bn_224/features.0"):
        assert f"cpu/conv2d/{first}" in names, first
        assert f"cpu/conv2d_backward_weight/{first}.backward_weight" in names, first
        assert f"cpu/conv2d_backward_data/{first}.backward_data" not in names, first
    # ResNet-50's later bottlenecks repeat the shapes of their stage's second block.
    assert "cpu/conv2d/resnet50_224/layer1.1.conv1" in names
    assert "cpu/conv2d/resnet50_224/layer1.2.conv1" not in names
    # vgg11_bn at both sizes: BatchNorm after its first convolution, the 7x7 adaptive pool (upsampling the
    # 1x1 map at 32x32) and the classifier's two dropouts, one shape listed once under the first layer of
    # each pass (the backward runs from the loss down); average pooling at the max pools' windows.
    for suite in ("vgg11_bn_32", "vgg11_bn_224"):
        for op, layer in (("batch_norm", "features.1"), ("batch_norm_backward", "features.1.backward"),
                          ("group_norm", "features.1"), ("group_norm_backward", "features.1.backward"),
                          ("adaptive_avg_pool2d", "avgpool"), ("adaptive_avg_pool2d_backward", "avgpool.backward"),
                          ("dropout", "classifier.2"), ("dropout_backward", "classifier.5.backward"),
                          ("max_pool2d", "features.3"), ("avg_pool2d", "features.3"),
                          ("avg_pool2d_backward", "features.3.backward")):
            assert f"cpu/{op}/{suite}/{layer}" in names, (suite, op, layer)
        assert f"cpu/dropout/{suite}/classifier.5" not in names, suite
    # DeepBench's rows run all three passes of their layer, and nothing else.
    for layer in ("conv_54x54x64_k64_n8", "gemm_1760x128x1760"):
        op = "conv2d" if layer.startswith("conv") else "linear"
        for suffix in ("", "_backward_data", "_backward_weight"):
            tail = suffix.replace("_backward", ".backward")
            assert f"cpu/{op}{suffix}/deepbench/{layer}{tail}" in names, (op, suffix, layer)
    assert {p[1] for p in parts if p[2] == "deepbench"} == {
        f"{op}{s}" for op in ("conv2d", "linear") for s in ("", "_backward_data", "_backward_weight")}
    check_work(sys.argv[1])
    print(f"cases_test: {len(names)} benchmarks, {len(OPS)} ops, {len(SUITES)} suites")


def check_work(binary):
    """The work model: a convolution's FLOPs (OpDef::flops) and a ReLU's bytes (its input and output), read
    back from the rate counters of one short run (rate x time per call = work per call)."""
    run = subprocess.run([binary, "--device=cpu", "--ceiling_seconds=0", "--suites=lenet5",
                          "--benchmark_min_time=0.001", "--benchmark_filter=^cpu/(conv2d|relu)/lenet5/(0|1)/",
                          "--benchmark_format=json"],
                         check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    rows = {b["name"]: b for b in json.loads(run.stdout)["benchmarks"]}
    conv, relu = rows["cpu/conv2d/lenet5/0/real_time"], rows["cpu/relu/lenet5/1/real_time"]
    assert conv["time_unit"] == relu["time_unit"] == "us"
    # lenet5's first layer: x [64, 1, 28, 28], w [6, 1, 5, 5], padding 2: 64 x 6 x 28 x 28 outputs of 25
    # taps, less those on the padding: along each axis the 2 outer outputs see 3 and 4 of the 5 rows, at
    # either edge, so 28 x 5 - 6 = 134 taps per axis, 134^2 per output plane.
    flops = conv["GFLOP/s"] * 1e9 * conv["real_time"] * 1e-6
    assert abs(flops / (2 * 64 * 6 * 134 * 134) - 1) < 1e-3, flops
    # The ReLU after the first pool: [64, 6, 14, 14] float32 in, the same out.
    moved = relu["GB/s"] * 1e9 * relu["real_time"] * 1e-6
    assert abs(moved / (2 * 4 * 64 * 6 * 14 * 14) - 1) < 1e-3, moved
    assert "GB/s" not in conv and "GFLOP/s" not in relu


if __name__ == "__main__":
    main()
