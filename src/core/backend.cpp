// The Backend's defaults for its optional operations (the convolutional section of
// backend.hpp): each throws an Error naming the backend and the operation, so a backend that
// implements only memory, BLAS and the MLP operations is complete, and a caller that skips the
// net's supports() check gets a message instead of a crash. And capture(), with the defaults
// of a backend that cannot capture. And SideLaneScope's destructor.
#include "lamina/backend.hpp"

#include <glog/logging.h>

#include "lamina/common.hpp"

namespace lamina {

SideLaneScope::~SideLaneScope() {
  try {
    close();
  } catch (const Error& e) {
    LOG(ERROR) << "closing the side lane after an error: " << e.what();
  }
}

void Backend::unsupported(Operation op, const char* function) const {
  fail("the ", name(), " backend does not implement ", operation_name(op), " (Backend::",
       function, "); run the net on a backend that does (supports(Operation) says which), or "
       "implement it in this backend");
}

void Backend::conv_forward(const ConvGeometry&, const float*, const float*, const float*,
                           float*) {
  unsupported(Operation::kConvolution, "conv_forward");
}
void Backend::conv_backward_data(const ConvGeometry&, const float*, const float*, float*) {
  unsupported(Operation::kConvolution, "conv_backward_data");
}
void Backend::conv_backward_filter(const ConvGeometry&, const float*, const float*, float*,
                                   float*) {
  unsupported(Operation::kConvolution, "conv_backward_filter");
}
void Backend::pool_forward(PoolMethod, const PoolGeometry&, const float*, float*, int32_t*) {
  unsupported(Operation::kPooling, "pool_forward");
}
void Backend::pool_backward(PoolMethod, const PoolGeometry&, const float*, const int32_t*,
                            float*) {
  unsupported(Operation::kPooling, "pool_backward");
}
void Backend::stochastic_pool_forward(const PoolGeometry&, uint64_t, uint64_t, uint64_t,
                                      PassCounter*, const float*, float*, int32_t*) {
  unsupported(Operation::kPooling, "stochastic_pool_forward");
}
void Backend::stochastic_pool_test(const PoolGeometry&, const float*, float*) {
  unsupported(Operation::kPooling, "stochastic_pool_test");
}
void Backend::stochastic_pool_test_backward(const PoolGeometry&, const float*, const float*,
                                            float*) {
  unsupported(Operation::kPooling, "stochastic_pool_test_backward");
}
void Backend::channel_moments(int64_t, int64_t, int64_t, const float*, float*, float*) {
  unsupported(Operation::kBatchNorm, "channel_moments");
}
void Backend::batch_norm_forward(int64_t, int64_t, int64_t, float, const float*, const float*,
                                 const float*, float*, float*, float*) {
  unsupported(Operation::kBatchNorm, "batch_norm_forward");
}
void Backend::batch_norm_inference(int64_t, int64_t, int64_t, float, const float*,
                                   const float*, const float*, const float*, float*, float*,
                                   float*) {
  unsupported(Operation::kBatchNorm, "batch_norm_inference");
}
void Backend::batch_norm_backward(int64_t, int64_t, int64_t, const float*, const float*,
                                  const float*, float*) {
  unsupported(Operation::kBatchNorm, "batch_norm_backward");
}
void Backend::batch_norm_scale_forward(int64_t, int64_t, int64_t, float, const float*,
                                       const float*, const float*, const float*, const float*,
                                       bool, float*, float*, float*) {
  unsupported(Operation::kBatchNormScale, "batch_norm_scale_forward");
}
void Backend::batch_norm_scale_sums(int64_t, int64_t, int64_t, const float*, const float*,
                                    const float*, const float*, bool, float*, float*, float*) {
  unsupported(Operation::kBatchNormScale, "batch_norm_scale_sums");
}
void Backend::batch_norm_scale_backward(int64_t, int64_t, int64_t, const float*, const float*,
                                        const float*, const float*, const float*, bool,
                                        const float*, float*) {
  unsupported(Operation::kBatchNormScale, "batch_norm_scale_backward");
}
void Backend::channel_affine(int64_t, int64_t, int64_t, const float*, const float*,
                             const float*, float*) {
  unsupported(Operation::kChannelAffine, "channel_affine");
}
void Backend::channel_reduce(int64_t, int64_t, int64_t, const float*, const float*, float*) {
  unsupported(Operation::kChannelAffine, "channel_reduce");
}
void Backend::scale_gradients(int64_t outer, int64_t channels, int64_t inner, const float* dy,
                              const float* x, float* dscale, float* dbias) {
  channel_reduce(outer, channels, inner, dy, x, dscale);
  if (dbias != nullptr) channel_reduce(outer, channels, inner, dy, nullptr, dbias);
}
void Backend::copy_rows(int64_t, int64_t, const float*, int64_t, float*, int64_t) {
  unsupported(Operation::kRowCopy, "copy_rows");
}
void Backend::eltwise_max_forward(int64_t, int, const float*, float*, int32_t*) {
  unsupported(Operation::kEltwiseMax, "eltwise_max_forward");
}
void Backend::eltwise_max_backward(int64_t, int, const float*, const int32_t*, float*) {
  unsupported(Operation::kEltwiseMax, "eltwise_max_backward");
}

void Backend::unsupported_half(const char* function) const {
  fail("the ", name(), " backend does not store values in 16 bits (Backend::", function,
       "); run the layer in FP32 or TF32, or on a backend whose supports_half says it does");
}
void Backend::gemm(Half, Transpose, Transpose, int64_t, int64_t, int64_t, float,
                   const uint16_t*, const uint16_t*, float, float*) {
  unsupported_half("gemm");
}
void Backend::gemm(Half, Transpose, Transpose, int64_t, int64_t, int64_t, float,
                   const uint16_t*, const uint16_t*, float, uint16_t*) {
  unsupported_half("gemm");
}
void Backend::linear_forward(Half, int64_t, int64_t, int64_t, const uint16_t*, const uint16_t*,
                             const float*, bool, uint16_t*) {
  unsupported_half("linear_forward");
}
void Backend::linear_bias_backward(Half, int64_t, int64_t, const uint16_t*, const uint16_t*,
                                   uint16_t*, float*) {
  unsupported_half("linear_bias_backward");
}
void Backend::activation_forward(Half, Activation, int64_t, float, const uint16_t*, uint16_t*) {
  unsupported_half("activation_forward");
}
void Backend::activation_backward(Half, Activation, int64_t, float, const uint16_t*,
                                  const uint16_t*, uint16_t*) {
  unsupported_half("activation_backward");
}
void Backend::axpby(Half, int64_t, float, const uint16_t*, float, uint16_t*) {
  unsupported_half("axpby");
}
void Backend::mul(Half, int64_t, const uint16_t*, const float*, uint16_t*) {
  unsupported_half("mul");
}
void Backend::mul(Half, int64_t, const uint16_t*, const uint16_t*, uint16_t*) {
  unsupported_half("mul");
}
void Backend::dropout_forward(Half, int64_t, float, uint64_t, uint64_t, PassCounter*,
                              const uint16_t*, float*, uint16_t*) {
  unsupported_half("dropout_forward");
}

void Backend::conv_forward(Half, const ConvGeometry&, const uint16_t*, const uint16_t*,
                           const float*, uint16_t*) {
  unsupported_half("conv_forward");
}
void Backend::conv_backward_data(Half, const ConvGeometry&, const uint16_t*, const uint16_t*,
                                 uint16_t*) {
  unsupported_half("conv_backward_data");
}
void Backend::conv_backward_filter(Half, const ConvGeometry&, const uint16_t*, const uint16_t*,
                                   float*, float*) {
  unsupported_half("conv_backward_filter");
}
void Backend::pool_forward(Half, PoolMethod, const PoolGeometry&, const uint16_t*, uint16_t*,
                           int32_t*) {
  unsupported_half("pool_forward");
}
void Backend::pool_backward(Half, PoolMethod, const PoolGeometry&, const uint16_t*,
                            const int32_t*, uint16_t*) {
  unsupported_half("pool_backward");
}
void Backend::channel_affine(Half, int64_t, int64_t, int64_t, const uint16_t*, const float*,
                             const float*, uint16_t*) {
  unsupported_half("channel_affine");
}
void Backend::channel_reduce(Half, int64_t, int64_t, int64_t, const uint16_t*,
                             const uint16_t*, float*) {
  unsupported_half("channel_reduce");
}
void Backend::scale_gradients(Half format, int64_t outer, int64_t channels, int64_t inner,
                              const uint16_t* dy, const uint16_t* x, float* dscale,
                              float* dbias) {
  channel_reduce(format, outer, channels, inner, dy, x, dscale);
  if (dbias != nullptr) channel_reduce(format, outer, channels, inner, dy, nullptr, dbias);
}
void Backend::channel_moments(Half, int64_t, int64_t, int64_t, const uint16_t*, float*, float*) {
  unsupported_half("channel_moments");
}
void Backend::batch_norm_forward(Half, int64_t, int64_t, int64_t, float, const uint16_t*,
                                 const float*, const float*, uint16_t*, float*, uint16_t*) {
  unsupported_half("batch_norm_forward");
}
void Backend::batch_norm_inference(Half, int64_t, int64_t, int64_t, float, const uint16_t*,
                                   const float*, const float*, const float*, uint16_t*, float*,
                                   float*) {
  unsupported_half("batch_norm_inference");
}
void Backend::batch_norm_backward(Half, int64_t, int64_t, int64_t, const uint16_t*,
                                  const uint16_t*, const float*, uint16_t*) {
  unsupported_half("batch_norm_backward");
}
void Backend::batch_norm_scale_forward(Half, int64_t, int64_t, int64_t, float, const uint16_t*,
                                       const float*, const float*, const float*, const float*,
                                       bool, uint16_t*, float*, uint16_t*) {
  unsupported_half("batch_norm_scale_forward");
}
void Backend::batch_norm_scale_sums(Half, int64_t, int64_t, int64_t, const uint16_t*,
                                    const uint16_t*, const float*, const float*, bool, float*,
                                    float*, float*) {
  unsupported_half("batch_norm_scale_sums");
}
void Backend::batch_norm_scale_backward(Half, int64_t, int64_t, int64_t, const uint16_t*,
                                        const uint16_t*, const float*, const float*,
                                        const float*, bool, const float*, uint16_t*) {
  unsupported_half("batch_norm_scale_backward");
}
void Backend::copy_rows(int64_t, int64_t, const uint16_t*, int64_t, uint16_t*, int64_t) {
  unsupported_half("copy_rows");
}
void Backend::eltwise_max_forward(Half, int64_t, int, const uint16_t*, uint16_t*, int32_t*) {
  unsupported_half("eltwise_max_forward");
}
void Backend::eltwise_max_backward(Half, int64_t, int, const uint16_t*, const int32_t*,
                                   uint16_t*) {
  unsupported_half("eltwise_max_backward");
}

std::unique_ptr<CapturedOps> Backend::capture(const std::function<void()>& ops) {
  begin_capture();
  try {
    ops();
  } catch (...) {
    end_capture(false);
    throw;
  }
  return end_capture(true);
}

void Backend::begin_capture() {
  fail("the ", name(), " backend cannot capture operations (can_capture() is false); run "
       "them directly");
}

std::unique_ptr<CapturedOps> Backend::end_capture(bool) {
  fail("the ", name(), " backend cannot capture operations");
}

}  // namespace lamina
