#!/usr/bin/env python3
"""CTest KernelsBenchCases: the benchmark list (kernels_bench at argv[1], --benchmark_list_tests) covers
every kernel of kernels/cpu/kernels.h and every suite, and follows the graphs: a first convolution has
no data gradient, ResNet-50's repeated bottleneck shapes are listed once, vgg11_bn's norm layers, adaptive
pool and dropout are taken from the registry's model."""
import re
import subprocess
import sys

KERNELS = """conv2d_fwd conv2d_bwd_data conv2d_bwd_weight linear_fwd linear_bwd_data linear_bwd_weight
max_pool_fwd max_pool_bwd avg_pool_fwd avg_pool_bwd global_avg_pool_fwd global_avg_pool_bwd
adaptive_avg_pool_fwd adaptive_avg_pool_bwd batch_norm_fwd batch_norm_bwd group_norm_fwd group_norm_bwd relu_fwd
relu_bwd dropout_fwd dropout_bwd add softmax_xent_fwd softmax_xent_bwd
sgd_momentum_step adamw_step count_nonfinite copy_or_accumulate""".split()
SUITES = "lenet5 cnn resnet20 resnet50_224 vgg11_bn_32 vgg11_bn_224 deepbench".split()


def main():
    listed = subprocess.run([sys.argv[1], "--device=cpu", "--ceiling_seconds=0", "--benchmark_list_tests=true"],
                            check=True, capture_output=True, text=True).stdout.split()
    names = [re.sub(r"/real_time$", "", n) for n in listed]
    assert len(names) == len(set(names)), "a benchmark is listed twice"
    parts = [n.split("/") for n in names]
    assert all(len(p) == 4 and p[0] == "cpu" for p in parts), "names are cpu/kernel/suite/layer"
    missing = set(KERNELS) - {p[1] for p in parts}
    assert not missing, f"kernels without a benchmark: {sorted(missing)}"
    missing = set(SUITES) - {p[2] for p in parts}
    assert not missing, f"suites without a benchmark: {sorted(missing)}"
    # The graphs' first convolutions take the input images, which need no gradient.
    for first in ("lenet5/0", "cnn/0", "resnet50_224/conv1", "vgg11_bn_224/features.0"):
        assert f"cpu/conv2d_fwd/{first}" in names, first
        assert f"cpu/conv2d_bwd_data/{first}.backward_data" not in names, first
    # ResNet-50's later bottlenecks repeat the shapes of their stage's second block.
    assert "cpu/conv2d_fwd/resnet50_224/layer1.1.conv1" in names
    assert "cpu/conv2d_fwd/resnet50_224/layer1.2.conv1" not in names
    # vgg11_bn at both sizes: BatchNorm after its first convolution, the 7x7 adaptive pool (upsampling the
    # 1x1 map at 32x32) and the classifier's two dropouts, one shape listed once under the first layer of
    # each pass (the backward runs from the loss down).
    for suite in ("vgg11_bn_32", "vgg11_bn_224"):
        for kernel, layer in (("batch_norm_fwd", "features.1"), ("batch_norm_bwd", "features.1.backward"),
                              ("adaptive_avg_pool_fwd", "avgpool"), ("adaptive_avg_pool_bwd", "avgpool.backward"),
                              ("dropout_fwd", "classifier.2"), ("dropout_bwd", "classifier.5.backward")):
            assert f"cpu/{kernel}/{suite}/{layer}" in names, (suite, layer)
        assert f"cpu/dropout_fwd/{suite}/classifier.5" not in names, suite
    print(f"cases_test: {len(names)} benchmarks, {len(KERNELS)} kernels, {len(SUITES)} suites")


if __name__ == "__main__":
    main()
