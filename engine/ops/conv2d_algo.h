// Which CPU algorithm a stride-1 3x3 convolution pass runs: the default kernels (kernels/cpu/conv2d.cc) or
// Winograd F(2x2, 3x3) (kernels/cpu/conv2d_winograd.cc), which needs 16 multiplies per 2x2 outputs instead
// of 36 but pays for its transforms, so which is faster depends on the layer and the CPU. Graph::conv_algo
// forces one, or (Measure, opt-in as torch.backends.cudnn.benchmark) asks for cuDNN's find: both are timed
// on the layer's own shape and the faster runs.
//
// The choice is made per pass (forward, data gradient) and per shape of one sample, never per batch size,
// and is remembered for the process: every plan of a graph (every micro-batch size) runs the same
// algorithm, so a sample's forward output stays bitwise the same at every micro-batch size. A checkpoint
// records the choices (conv_choices_text), and a run resumed from it takes them as they are
// (Graph::kernel_choices), so it computes the bits the uninterrupted run would have on this machine.
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "kernels/cpu/shapes.h"

namespace crumb {

enum class ConvAlgoPass { Forward, Data };

// Whether the pass runs Winograd for shape s (its n is ignored) in graph g: never where Winograd does not
// apply (stride, kernel size, groups); else as Graph::conv_algo forces it, as g.kernel_choices() records
// it, or by measurement (the first measurement of this key in the process; later calls reuse it).
bool conv_runs_winograd(const Graph& g, const cpu::Conv2dShape& s, ConvAlgoPass pass);

// The choices this process made for g's convolution nodes where it measured or took them from a record
// ("<key>=winograd|direct" joined by ';', keys as in conv_choices_key), for a checkpoint's metadata; and
// the reverse, into g's kernel choices (a malformed entry is an error naming `source`).
std::string conv_choices_text(const Graph& g);
void set_conv_choices(Graph& g, const std::string& text, const std::string& source);
// The checkpoint metadata key that holds conv_choices_text.
inline constexpr const char* kConvChoicesKey = "train.conv_algos";

}  // namespace crumb
