// The Native backend: host memory, OpenBLAS for BLAS, OpenMP loops for the rest.
#pragma once

#include "lamina/backend.hpp"

namespace lamina {

class NativeBackend final : public Backend {
 public:
  std::string name() const override { return "native"; }
  bool is_host() const override { return true; }

  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void copy(size_t bytes, const void* src, void* dst) override;
  void copy_to_host(size_t bytes, const void* src, void* host_dst) override;
  void copy_from_host(size_t bytes, const void* host_src, void* dst) override;
  void zero(size_t bytes, void* p) override;
  void fill(int64_t n, float value, float* x) override;
  void synchronize() override {}

  void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override;
  void gemv(Transpose trans_a, int64_t m, int64_t n, float alpha, const float* a,
            const float* x, float beta, float* y) override;
  void axpy(int64_t n, float alpha, const float* x, float* y) override;
  void axpby(int64_t n, float alpha, const float* x, float beta, float* y) override;
  void scal(int64_t n, float alpha, float* x) override;
  void mul(int64_t n, const float* a, const float* b, float* y) override;
  void dot(int64_t n, const float* x, const float* y, float* result) override;
  void to_half(Half format, int64_t n, const float* x, uint16_t* y) override;
  void from_half(Half format, int64_t n, const uint16_t* x, float* y) override;
  // half_ops.cpp
  bool supports_half(Half format) const override;
  void gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const uint16_t* a, const uint16_t* b, float beta, float* c) override;
  void gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const uint16_t* a, const uint16_t* b, float beta, uint16_t* c) override;
  void linear_forward(Half format, int64_t rows, int64_t n, int64_t k, const uint16_t* x,
                      const uint16_t* w, const float* bias, bool relu, uint16_t* y) override;
  void linear_bias_backward(Half format, int64_t rows, int64_t n, const uint16_t* y,
                            const uint16_t* dy, uint16_t* dz, float* db) override;
  void activation_forward(Half format, Activation f, int64_t n, float negative_slope,
                          const uint16_t* x, uint16_t* y) override;
  void activation_backward(Half format, Activation f, int64_t n, float negative_slope,
                           const uint16_t* y, const uint16_t* dy, uint16_t* dx) override;
  void axpby(Half format, int64_t n, float alpha, const uint16_t* x, float beta,
             uint16_t* y) override;
  void mul(Half format, int64_t n, const uint16_t* a, const float* b, uint16_t* y) override;
  void mul(Half format, int64_t n, const uint16_t* a, const uint16_t* b, uint16_t* y) override;
  void dropout_forward(Half format, int64_t n, float ratio, uint64_t seed, uint64_t offset,
                       PassCounter* counter, const uint16_t* x, float* mask,
                       uint16_t* y) override;
  // half_conv_ops.cpp
  void conv_forward(Half format, const ConvGeometry& g, const uint16_t* x,
                    const uint16_t* weight, const float* bias, uint16_t* y) override;
  void conv_backward_data(Half format, const ConvGeometry& g, const uint16_t* weight,
                          const uint16_t* dy, uint16_t* dx) override;
  void conv_backward_filter(Half format, const ConvGeometry& g, const uint16_t* x,
                            const uint16_t* dy, float* dweight, float* dbias) override;
  void pool_forward(Half format, PoolMethod method, const PoolGeometry& g, const uint16_t* x,
                    uint16_t* y, int32_t* mask) override;
  void pool_backward(Half format, PoolMethod method, const PoolGeometry& g, const uint16_t* dy,
                     const int32_t* mask, uint16_t* dx) override;
  // half_channel_ops.cpp
  void channel_affine(Half format, int64_t outer, int64_t channels, int64_t inner,
                      const uint16_t* x, const float* scale, const float* bias,
                      uint16_t* y) override;
  void channel_reduce(Half format, int64_t outer, int64_t channels, int64_t inner,
                      const uint16_t* a, const uint16_t* b, float* out) override;
  void channel_moments(Half format, int64_t outer, int64_t channels, int64_t inner,
                       const uint16_t* x, float* mean, float* var) override;
  void batch_norm_forward(Half format, int64_t outer, int64_t channels, int64_t inner,
                          float eps, const uint16_t* x, const float* mean, const float* var,
                          uint16_t* y, float* inv_std, uint16_t* kept) override;
  void batch_norm_inference(Half format, int64_t outer, int64_t channels, int64_t inner,
                            float eps, const uint16_t* x, const float* mean_sum,
                            const float* var_sum, const float* factor, uint16_t* y,
                            float* mean, float* inv_std) override;
  void batch_norm_backward(Half format, int64_t outer, int64_t channels, int64_t inner,
                           const uint16_t* y, const uint16_t* dy, const float* inv_std,
                           uint16_t* dx) override;
  void batch_norm_scale_forward(Half format, int64_t outer, int64_t channels, int64_t inner,
                                float eps, const uint16_t* x, const float* mean,
                                const float* var, const float* scale, const float* bias,
                                bool relu, uint16_t* y, float* inv_std, uint16_t* kept) override;
  void batch_norm_scale_sums(Half format, int64_t outer, int64_t channels, int64_t inner,
                             const uint16_t* kept, const uint16_t* dy, const float* scale,
                             const float* bias, bool relu, float* means, float* dscale,
                             float* dbias) override;
  void batch_norm_scale_backward(Half format, int64_t outer, int64_t channels, int64_t inner,
                                 const uint16_t* kept, const uint16_t* dy, const float* inv_std,
                                 const float* scale, const float* bias, bool relu,
                                 const float* means, uint16_t* dx) override;
  // channel_ops.cpp (16-bit values are copied, never rounded)
  void copy_rows(int64_t rows, int64_t cols, const uint16_t* src, int64_t src_stride,
                 uint16_t* dst, int64_t dst_stride) override;
  void eltwise_max_forward(Half format, int64_t n, int index, const uint16_t* x, uint16_t* y,
                           int32_t* mask) override;
  void eltwise_max_backward(Half format, int64_t n, int index, const uint16_t* dy,
                            const int32_t* mask, uint16_t* dx) override;

  void activation_forward(Activation f, int64_t n, float negative_slope, const float* x,
                          float* y) override;
  void activation_backward(Activation f, int64_t n, float negative_slope, const float* y,
                           const float* dy, float* dx) override;
  void softmax_forward(int64_t rows, int64_t cols, bool log, const float* x, float* y) override;
  void softmax_backward(int64_t rows, int64_t cols, bool log, const float* y, const float* dy,
                        float* dx) override;
  void softmax_cross_entropy_forward(int64_t rows, int64_t cols, const float* x,
                                     const float* labels, const LossOptions& options,
                                     float* prob, float* loss, float* norm) override;
  void softmax_cross_entropy_backward(int64_t rows, int64_t cols, const float* prob,
                                      const float* labels, const LossOptions& options,
                                      const float* norm, const float* dloss,
                                      float* dx) override;
  void nll_loss_forward(int64_t rows, int64_t cols, const float* logp, const float* labels,
                        const LossOptions& options, float* loss, float* norm) override;
  void nll_loss_backward(int64_t rows, int64_t cols, const float* labels,
                         const LossOptions& options, const float* norm, const float* dloss,
                         float* dx) override;
  void euclidean_loss_forward(int64_t rows, int64_t cols, const float* a, const float* b,
                              float* diff, float* loss) override;
  void euclidean_loss_backward(int64_t rows, int64_t cols, float sign, const float* diff,
                               const float* dloss, float* dx) override;
  void accuracy(int64_t rows, int64_t cols, int top_k, const float* x, const float* labels,
                const LossOptions& options, float* out) override;
  // linear_ops.cpp
  void linear_forward(int64_t rows, int64_t n, int64_t k, const float* x, const float* w,
                      const float* bias, bool relu, float* y) override;
  void linear_bias_backward(int64_t rows, int64_t n, const float* y, const float* dy,
                            float* dz, float* db) override;
  void dropout_forward(int64_t n, float ratio, uint64_t seed, uint64_t offset,
                       PassCounter* counter, const float* x, float* mask, float* y) override;
  void gather_batch(const BatchOrder& order, const GatherTop& data,
                    const GatherTop& label) override;

  void conv_forward(const ConvGeometry& g, const float* x, const float* weight, const float* bias,
                    float* y) override;
  void conv_backward_data(const ConvGeometry& g, const float* weight, const float* dy,
                          float* dx) override;
  void conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy,
                            float* dweight, float* dbias) override;
  void pool_forward(PoolMethod method, const PoolGeometry& g, const float* x, float* y,
                    int32_t* mask) override;
  void pool_backward(PoolMethod method, const PoolGeometry& g, const float* dy,
                     const int32_t* mask, float* dx) override;
  void stochastic_pool_forward(const PoolGeometry& g, uint64_t seed, uint64_t offset,
                               uint64_t per_pass, PassCounter* counter, const float* x,
                               float* y, int32_t* mask) override;
  void stochastic_pool_test(const PoolGeometry& g, const float* x, float* y) override;
  void stochastic_pool_test_backward(const PoolGeometry& g, const float* x, const float* dy,
                                     float* dx) override;
  void channel_moments(int64_t outer, int64_t channels, int64_t inner, const float* x,
                       float* mean, float* var) override;
  void batch_norm_forward(int64_t outer, int64_t channels, int64_t inner, float eps,
                          const float* x, const float* mean, const float* var, float* y,
                          float* inv_std, float* kept) override;
  void batch_norm_inference(int64_t outer, int64_t channels, int64_t inner, float eps,
                            const float* x, const float* mean_sum, const float* var_sum,
                            const float* factor, float* y, float* mean, float* inv_std) override;
  void batch_norm_backward(int64_t outer, int64_t channels, int64_t inner, const float* y,
                           const float* dy, const float* inv_std, float* dx) override;
  void batch_norm_scale_forward(int64_t outer, int64_t channels, int64_t inner, float eps,
                                const float* x, const float* mean, const float* var,
                                const float* scale, const float* bias, bool relu, float* y,
                                float* inv_std, float* kept) override;
  void batch_norm_scale_sums(int64_t outer, int64_t channels, int64_t inner, const float* kept,
                             const float* dy, const float* scale, const float* bias, bool relu,
                             float* means, float* dscale, float* dbias) override;
  void batch_norm_scale_backward(int64_t outer, int64_t channels, int64_t inner,
                                 const float* kept, const float* dy, const float* inv_std,
                                 const float* scale, const float* bias, bool relu,
                                 const float* means, float* dx) override;
  void channel_affine(int64_t outer, int64_t channels, int64_t inner, const float* x,
                      const float* scale, const float* bias, float* y) override;
  void channel_reduce(int64_t outer, int64_t channels, int64_t inner, const float* a,
                      const float* b, float* out) override;
  void copy_rows(int64_t rows, int64_t cols, const float* src, int64_t src_stride, float* dst,
                 int64_t dst_stride) override;
  void eltwise_max_forward(int64_t n, int index, const float* x, float* y,
                           int32_t* mask) override;
  void eltwise_max_backward(int64_t n, int index, const float* dy, const int32_t* mask,
                            float* dx) override;
  // ---- the Caffe catalogue (backend.hpp) ----
  // pointwise and PReLU (pointwise_ops)
  void pointwise_forward(const Pointwise& f, int64_t n, const float* x, float* y) override;
  void pointwise_backward(const Pointwise& f, int64_t n, const float* x, const float* y,
                          const float* dy, float* dx) override;
  void prelu_forward(int64_t outer, int64_t channels, int64_t inner, const float* x,
                     const float* slope, float* y) override;
  void prelu_backward(int64_t outer, int64_t channels, int64_t inner, const float* x,
                      const float* dy, const float* slope, float* dx, float* dslope) override;
  // --
  // tensor copies and reductions (tensor_ops)
  void copy_block(const BlockCopy& box, const float* src, float* dst, bool accumulate) override;
  void reduce_middle(ReduceOp op, int64_t outer, int64_t mid, int64_t inner, float coeff,
                     const float* x, float* y) override;
  void reduce_middle_backward(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                              float coeff, const float* x, const float* dy, float* dx) override;
  void argmax(int64_t outer, int64_t channels, int64_t inner, int64_t top_k, const float* x,
              float* index, float* value) override;
  void gather_rows(int64_t rows, int64_t cols, const float* index, int64_t src_rows,
                   const float* src, float* dst) override;
  void scatter_add_rows(int64_t rows, int64_t cols, const float* index, int64_t dst_rows,
                        const float* src, float* dst) override;
  // --
  // LRN and im2col (lrn_ops, im2col_ops)
  void lrn_forward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args, const float* x,
                   float* scale, float* y) override;
  void lrn_backward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args, const float* x,
                    const float* y, const float* scale, const float* dy, float* dx) override;
  void im2col(const ConvGeometry& g, const float* x, float* col) override;
  void col2im(const ConvGeometry& g, const float* col, float* dx) override;
  // --
  // Caffe's losses (caffe_loss_ops)
  // (transpose, of the tensor group, is the softmax layers' over an axis: transpose_ops)
  void transpose(int64_t outer, int64_t rows, int64_t cols, const float* x, float* y) override;
  void sigmoid_cross_entropy_forward(int64_t n, const float* x, const float* target,
                                     const LossOptions& options, float* loss,
                                     float* norm) override;
  void sigmoid_cross_entropy_backward(int64_t n, const float* x, const float* target,
                                      const LossOptions& options, const float* norm,
                                      const float* dloss, float* dx) override;
  void hinge_loss_forward(int64_t rows, int64_t cols, int p, const float* x,
                          const float* labels, float* margin, float* loss) override;
  void hinge_loss_backward(int64_t rows, int64_t cols, int p, const float* margin,
                           const float* labels, const float* dloss, float* dx) override;
  void contrastive_loss_forward(int64_t rows, int64_t cols, float margin, bool legacy,
                                const float* a, const float* b, const float* similar,
                                float* diff, float* dist_sq, float* loss) override;
  void contrastive_loss_backward(int64_t rows, int64_t cols, float margin, bool legacy,
                                 float sign, const float* diff, const float* dist_sq,
                                 const float* similar, const float* dloss, float* dx) override;
  void multinomial_logistic_loss_forward(int64_t rows, int64_t cols, const float* prob,
                                         const float* labels, float* loss) override;
  void multinomial_logistic_loss_backward(int64_t rows, int64_t cols, const float* prob,
                                          const float* labels, const float* dloss,
                                          float* dx) override;
  void infogain_loss_forward(int64_t rows, int64_t cols, const float* prob, const float* labels,
                             const float* infogain, const LossOptions& options, float* loss,
                             float* norm) override;
  void infogain_loss_backward(int64_t rows, int64_t cols, const float* prob,
                              const float* labels, const float* infogain,
                              const LossOptions& options, const float* norm,
                              const float* dloss, float* dx) override;
  // --
  bool supports(Operation) const override { return true; }  // every optional operation
  bool supports_math(Math) const override { return true; }  // TF32 by rounding (products.hpp)

  void update(const UpdateArgs& args, const StepState* step, const UpdateLayout& layout,
              float* weights, const float* grads, float* history, float* history2) override;
  void advance_step(const StepSchedule& schedule, StepState* state) override;

 private:
  // The calling thread's staging array `slot` (0-4; half_ops.cpp), at least n floats, valid
  // until that slot is used again; kept, so a training step allocates nothing once the
  // first has run. half_staging: the same for 16-bit values (slots 0-1).
  static float* staging(int slot, int64_t n);
  static uint16_t* half_staging(int slot, int64_t n);
  // x (n values in format, may be null) as floats in staging array `slot`.
  const float* widen(Half format, int64_t n, const uint16_t* x, int slot);
};

}  // namespace lamina
