// Owning wrappers for cuDNN descriptors, so the plans holding them are movable, not copyable, and
// release them when destroyed. Internal to the cuDNN-backed sources.
#pragma once
#include <cudnn.h>

#include <memory>
#include <type_traits>

#include "engine/base/tensor.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda::detail {

template <class Desc, cudnnStatus_t (*Create)(Desc*), cudnnStatus_t (*Destroy)(Desc)>
class Descriptor {
 public:
  Descriptor() {
    Desc desc = nullptr;
    CRUMB_CUDNN_CHECK(Create(&desc));
    owned_.reset(desc);
  }
  Desc get() const { return owned_.get(); }

 private:
  struct Deleter {
    void operator()(Desc desc) const noexcept { Destroy(desc); }
  };
  std::unique_ptr<std::remove_pointer_t<Desc>, Deleter> owned_;
};

using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

inline cudnnTensorFormat_t format_of(Layout layout) {
  return layout == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// A dense tensor [n, c, h, w] of float (or `dtype`), laid out NCHW or NHWC (the dims are the same either
// way; the format sets the strides). Cheap: no allocation, no device work.
inline void set_image(const TensorDescriptor& desc, int n, int c, int h, int w, cudnnDataType_t dtype = CUDNN_DATA_FLOAT,
                      Layout layout = Layout::NCHW) {
  CRUMB_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.get(), format_of(layout), dtype, n, c, h, w));
}

}  // namespace crumb::cuda::detail
