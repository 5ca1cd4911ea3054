// CudaBackend: the Backend on one GPU. Memory is device memory; cuBLAS does the BLAS and
// Lamina's kernels the rest, all on the device context's stream (parameter gradients on the
// side lane's stream during a backward pass).
//
// Where things are:
//   cuda_backend.cpp     memory, transfers, cuBLAS calls, make_cuda_backend, device_query
//   blas_kernels.cu      fill, mul, axpby, dot
//   half_kernels.cu      16-bit storage: to_half, from_half (rounding.hpp's conversions),
//                        axpby and mul in 16 bits, add_half
//   half_gemm.cu         16-bit storage: supports_half and the gemms with 16-bit operands
//   half_storage.cuh     how kernels written once read and write FP32 or 16-bit arrays
//   activation_kernels.cu, softmax_kernels.cu, loss_kernels.cu (cross-entropy, NLL,
//   euclidean, accuracy), data_kernels.cu (dropout, gather_batch), update_kernel.cu
//   linear.cu            the fused Linear: cuBLASLt with bias/ReLU epilogues (FP32 or 16-bit)
//   linear_bias_backward.cu  the ReLU-derivative + bias-gradient kernel (FP32 or 16-bit)
//   cudnn.cpp            everything cuDNN (the one file that includes cudnn.h): the handle,
//                        and convolution (FP32, TF32, BF16, FP16), with its plans
//                        (descriptors, algorithms) cached per geometry and mode in the context
//   conv_kernels.cu      convolution by im2col + cuBLAS, for builds without cuDNN and
//                        geometries cuDNN cannot take
//   pooling_kernels.cu, batch_norm_kernels.cu, channel_kernels.cu (per-channel affine and
//   sums), both on channel_sums.cuh (per-channel reductions) and channel_groups.cuh
//   (elementwise launches, 16 bytes per load),
//   eltwise_kernels.cu (copy_rows, eltwise max)
//   the Caffe catalogue: pointwise_kernels.cu (pointwise functions, PReLU),
//   transpose_kernels.cu, tensor_kernels.cu (block copies, row gathers and scatter-adds),
//   reduce_kernels.cu (reduce_middle, argmax), lrn_kernels.cu, im2col_kernels.cu,
//   caffe_loss_kernels.cu
//   cuda_graph.cpp       capture(): steps recorded into CUDA graphs and replayed
//   side_lane.cpp        the side lane for parameter gradients (a second stream)
// Conventions: every launch is checked (LAMINA_CUDA_LAUNCHED); scalars produced on the
// device (loss, norm, accuracy) stay there; reductions to a scalar use a fixed order (block
// tree reductions, then one block over the partial results), so they are bit-identical run
// to run; sums of losses are accumulated in double like the Native backend's. Nothing uses
// float atomics: pooling's backward gathers over the windows that cover an input element,
// per-channel sums add fixed parts of each channel in order, and convolution uses
// deterministic cuDNN algorithms, so every result is bit-identical run to run.
#pragma once

#include <string>

#include "backends/cuda/cuda_context.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

inline cublasOperation_t blas_op(Transpose t) {
  return t == Transpose::kNo ? CUBLAS_OP_N : CUBLAS_OP_T;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaContext& context) : context_(context) {}

  // "cuda:0 (NVIDIA H200)"
  std::string name() const override {
    return "cuda:" + std::to_string(context_.device()) + " (" + context_.properties().name + ")";
  }
  bool is_host() const override { return false; }
  CudaContext& context() const { return context_; }

  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void copy(size_t bytes, const void* src, void* dst) override;
  void copy_to_host(size_t bytes, const void* src, void* host_dst) override;
  void copy_from_host(size_t bytes, const void* host_src, void* dst) override;
  void zero(size_t bytes, void* p) override;
  void fill(int64_t n, float value, float* x) override;
  void synchronize() override;
  void* allocate_pinned(size_t bytes) override;    // cuda_upload.cpp
  void deallocate_pinned(void* p) noexcept override;
  void upload(size_t bytes, const void* pinned_src, void* dst) override;
  std::unique_ptr<UploadFence> make_fence() override;

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
  // The operations on 16-bit arrays: BF16 from compute capability 8.0, FP16 from 7.0.
  bool supports_half(Half format) const override;
  void gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const uint16_t* a, const uint16_t* b, float beta, float* c) override;
  void gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, const uint16_t* a, const uint16_t* b, float beta,
            uint16_t* c) override;
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
  void scale_gradients(int64_t outer, int64_t channels, int64_t inner, const float* dy,
                       const float* x, float* dscale, float* dbias) override;
  void copy_rows(int64_t rows, int64_t cols, const float* src, int64_t src_stride, float* dst,
                 int64_t dst_stride) override;
  void eltwise_max_forward(int64_t n, int index, const float* x, float* y,
                           int32_t* mask) override;
  void eltwise_max_backward(int64_t n, int index, const float* dy, const int32_t* mask,
                            float* dx) override;
  // The optional groups in 16 bits: cudnn.cpp, pooling_kernels.cu, batch_norm_kernels.cu,
  // channel_kernels.cu, eltwise_kernels.cu.
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
  void channel_affine(Half format, int64_t outer, int64_t channels, int64_t inner,
                      const uint16_t* x, const float* scale, const float* bias,
                      uint16_t* y) override;
  void channel_reduce(Half format, int64_t outer, int64_t channels, int64_t inner,
                      const uint16_t* a, const uint16_t* b, float* out) override;
  void scale_gradients(Half format, int64_t outer, int64_t channels, int64_t inner,
                       const uint16_t* dy, const uint16_t* x, float* dscale,
                       float* dbias) override;
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
  void copy_rows(int64_t rows, int64_t cols, const uint16_t* src, int64_t src_stride,
                 uint16_t* dst, int64_t dst_stride) override;
  void eltwise_max_forward(Half format, int64_t n, int index, const uint16_t* x, uint16_t* y,
                           int32_t* mask) override;
  void eltwise_max_backward(Half format, int64_t n, int index, const uint16_t* dy,
                            const int32_t* mask, uint16_t* dx) override;
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
  // Every optional operation: convolution runs through cuDNN, or im2col + cuBLAS without it.
  bool supports(Operation) const override { return true; }
  bool supports_math(Math math) const override;  // TF32 from compute capability 8.0

  void update(const UpdateArgs& args, const StepState* step, const UpdateLayout& layout,
              float* weights, const float* grads, float* history, float* history2) override;
  void advance_step(const StepSchedule& schedule, StepState* state) override;

  bool has_side_lane() const override { return true; }
  void open_side_lane() override;  // side_lane.cpp
  void close_side_lane() override;
  void to_side_lane() override;
  void to_main_lane() override;

  bool can_capture() const override { return true; }
  std::string algorithm_choices() const override;  // algorithm_choices.cpp
  void reuse_algorithm_choices(const std::string& choices) override;

 protected:
  void begin_capture() override;  // cuda_graph.cpp
  std::unique_ptr<CapturedOps> end_capture(bool keep) override;

 private:
  // C (count values) = beta C, the result of a gemm with k == 0 (cuda_backend.cpp).
  void empty_product(int64_t count, float beta, float* c);
  // gemm through cublasGemmEx, A and B of type ab, C of c_type, k > 0 (cuda_backend.cpp).
  void gemm_ex(cudaDataType_t ab, cudaDataType_t c_type, cublasComputeType_t compute,
               Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
               float alpha, const void* a, const void* b, float beta, void* c);
  // gemm with an FP32 C, k > 0: a cuBLASLt product (its algorithm timed, lt_matmul.cu), or
  // cublasGemmEx where cuBLASLt has none (cuda_backend.cpp).
  void lt_gemm(cudaDataType_t ab, Math math, Transpose trans_a, Transpose trans_b, int64_t m,
               int64_t n, int64_t k, float alpha, const void* a, const void* b, float beta,
               float* c);
  // gemm in TF32, k > 0 (tf32_gemm.cu).
  void tf32_gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, const float* b, float beta, float* c);
  // Convolution by im2col + cuBLAS (conv_kernels.cu), one image at a time with the column
  // matrix in the context's workspace; no bias (the callers add it). Same conventions as
  // the conv_* operations: y and dx written with =, dweight accumulated with +=.
  void im2col_conv_forward(const ConvGeometry& g, const float* x, const float* weight,
                           float* y);
  void im2col_conv_backward_data(const ConvGeometry& g, const float* weight, const float* dy,
                                 float* dx);
  void im2col_conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy,
                                   float* dweight);
  // The same in 16 bits where cuDNN cannot: the operands widened to floats (in the
  // workspace, after the column matrix), the float path, the results rounded; this call's
  // filter gradient is rounded before it is added, as cuDNN's is.
  void im2col_conv_forward(Half format, const ConvGeometry& g, const uint16_t* x,
                           const uint16_t* weight, uint16_t* y);
  void im2col_conv_backward_data(Half format, const ConvGeometry& g, const uint16_t* weight,
                                 const uint16_t* dy, uint16_t* dx);
  void im2col_conv_backward_filter(Half format, const ConvGeometry& g, const uint16_t* x,
                                   const uint16_t* dy, float* dweight);
  // y[i] += the value of x[i] in format, i < n (half_kernels.cu).
  void add_half(Half format, int64_t n, const uint16_t* x, float* y);

  // y (rows, n) = act(x (rows, k) W (n, k)^T + bias) as one cuBLASLt matmul, x, W and y
  // stored as `storage` (CUDA_R_32F, _16BF or _16F), the bias FP32 (linear.cu). False,
  // having done nothing, where cuBLASLt cannot (no algorithm; a bias with a 16-bit y): the
  // caller runs it unfused.
  bool fused_linear(cudaDataType_t storage, int64_t rows, int64_t n, int64_t k, const void* x,
                    const void* w, const float* bias, bool relu, void* y);
  // D = alpha op(A) op(B) + beta D (with the epilogue's bias and ReLU) as key says, through
  // its cached plan (lt_matmul.cu). False, having done nothing, where cuBLASLt has no
  // algorithm for it.
  bool lt_matmul(const LtKey& key, float alpha, const void* a, const void* b,
                 const float* bias, float beta, void* d);

  // Makes the device current on this thread and returns the stream the operation goes to
  // (the main stream, or the side lane's between to_side_lane and to_main_lane).
  cudaStream_t on_device() const {
    context_.make_current();
    return context_.lane_stream();
  }

  CudaContext& context_;
};

}  // namespace lamina::cuda_detail
