// Backends that forward to another backend (a NativeBackend of their own unless given one),
// for tests that need a backend with one behaviour changed (counting copies, posing as a
// device, injecting an error): derive from one and override only that.
//   CoreForwardingBackend  forwards only what every backend must implement (memory, BLAS, the
//                          MLP operations, the update): what a new backend starts as, with
//                          every optional operation left to Backend's defaults;
//   ForwardingBackend      forwards every operation, optional ones and supports() included
//                          (the Caffe catalogue's through forwarding_catalogue.hpp);
//   CountingBackend        a ForwardingBackend that counts host/backend transfers.
#pragma once

#include <cstdint>
#include <memory>

#include "lamina/native_backend.hpp"

namespace lamina::testing {

class CoreForwardingBackend : public Backend {
 public:
  // Forwards to a NativeBackend of its own.
  CoreForwardingBackend() : owned_(std::make_unique<NativeBackend>()), inner_(*owned_) {}
  // Forwards to inner, which must outlive this backend.
  explicit CoreForwardingBackend(Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name(); }
  bool is_host() const override { return inner_.is_host(); }
  void* allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) noexcept override { inner_.deallocate(p); }
  void copy(size_t bytes, const void* src, void* dst) override { inner_.copy(bytes, src, dst); }
  void copy_to_host(size_t bytes, const void* src, void* dst) override {
    inner_.copy_to_host(bytes, src, dst);
  }
  void copy_from_host(size_t bytes, const void* src, void* dst) override {
    inner_.copy_from_host(bytes, src, dst);
  }
  void* allocate_pinned(size_t bytes) override { return inner_.allocate_pinned(bytes); }
  void deallocate_pinned(void* p) noexcept override { inner_.deallocate_pinned(p); }
  void upload(size_t bytes, const void* src, void* dst) override {
    inner_.upload(bytes, src, dst);
  }
  std::unique_ptr<UploadFence> make_fence() override { return inner_.make_fence(); }
  void zero(size_t bytes, void* p) override { inner_.zero(bytes, p); }
  void fill(int64_t n, float v, float* x) override { inner_.fill(n, v, x); }
  void synchronize() override { inner_.synchronize(); }
  bool supports_math(Math math) const override { return inner_.supports_math(math); }
  void set_math(Math math) override {
    Backend::set_math(math);
    inner_.set_math(math);
  }
  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    inner_.gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void gemv(Transpose t, int64_t m, int64_t n, float alpha, const float* a, const float* x,
            float beta, float* y) override {
    inner_.gemv(t, m, n, alpha, a, x, beta, y);
  }
  void axpy(int64_t n, float a, const float* x, float* y) override { inner_.axpy(n, a, x, y); }
  void axpby(int64_t n, float a, const float* x, float b, float* y) override {
    inner_.axpby(n, a, x, b, y);
  }
  void scal(int64_t n, float a, float* x) override { inner_.scal(n, a, x); }
  void mul(int64_t n, const float* a, const float* b, float* y) override {
    inner_.mul(n, a, b, y);
  }
  void dot(int64_t n, const float* x, const float* y, float* r) override { inner_.dot(n, x, y, r); }
  void to_half(Half f, int64_t n, const float* x, uint16_t* y) override {
    inner_.to_half(f, n, x, y);
  }
  void from_half(Half f, int64_t n, const uint16_t* x, float* y) override {
    inner_.from_half(f, n, x, y);
  }
  void activation_forward(Activation f, int64_t n, float s, const float* x, float* y) override {
    inner_.activation_forward(f, n, s, x, y);
  }
  void activation_backward(Activation f, int64_t n, float s, const float* y, const float* dy,
                           float* dx) override {
    inner_.activation_backward(f, n, s, y, dy, dx);
  }
  void softmax_forward(int64_t r, int64_t c, bool log, const float* x, float* y) override {
    inner_.softmax_forward(r, c, log, x, y);
  }
  void softmax_backward(int64_t r, int64_t c, bool log, const float* y, const float* dy,
                        float* dx) override {
    inner_.softmax_backward(r, c, log, y, dy, dx);
  }
  void softmax_cross_entropy_forward(int64_t r, int64_t c, const float* x, const float* labels,
                                     const LossOptions& o, float* prob, float* loss,
                                     float* norm) override {
    inner_.softmax_cross_entropy_forward(r, c, x, labels, o, prob, loss, norm);
  }
  void softmax_cross_entropy_backward(int64_t r, int64_t c, const float* prob,
                                      const float* labels, const LossOptions& o,
                                      const float* norm, const float* dloss, float* dx) override {
    inner_.softmax_cross_entropy_backward(r, c, prob, labels, o, norm, dloss, dx);
  }
  void nll_loss_forward(int64_t r, int64_t c, const float* logp, const float* labels,
                        const LossOptions& o, float* loss, float* norm) override {
    inner_.nll_loss_forward(r, c, logp, labels, o, loss, norm);
  }
  void nll_loss_backward(int64_t r, int64_t c, const float* labels, const LossOptions& o,
                         const float* norm, const float* dloss, float* dx) override {
    inner_.nll_loss_backward(r, c, labels, o, norm, dloss, dx);
  }
  void euclidean_loss_forward(int64_t r, int64_t c, const float* a, const float* b, float* diff,
                              float* loss) override {
    inner_.euclidean_loss_forward(r, c, a, b, diff, loss);
  }
  void euclidean_loss_backward(int64_t r, int64_t c, float sign, const float* diff,
                               const float* dloss, float* dx) override {
    inner_.euclidean_loss_backward(r, c, sign, diff, dloss, dx);
  }
  void accuracy(int64_t r, int64_t c, int k, const float* x, const float* labels,
                const LossOptions& o, float* out) override {
    inner_.accuracy(r, c, k, x, labels, o, out);
  }
  void linear_forward(int64_t rows, int64_t n, int64_t k, const float* x, const float* w,
                      const float* bias, bool relu, float* y) override {
    inner_.linear_forward(rows, n, k, x, w, bias, relu, y);
  }
  void linear_bias_backward(int64_t rows, int64_t n, const float* y, const float* dy,
                            float* dz, float* db) override {
    inner_.linear_bias_backward(rows, n, y, dy, dz, db);
  }
  void dropout_forward(int64_t n, float ratio, uint64_t seed, uint64_t offset,
                       PassCounter* counter, const float* x, float* mask, float* y) override {
    inner_.dropout_forward(n, ratio, seed, offset, counter, x, mask, y);
  }
  void gather_batch(const BatchOrder& order, const GatherTop& data,
                    const GatherTop& label) override {
    inner_.gather_batch(order, data, label);
  }
  void update(const UpdateArgs& args, const StepState* step, const UpdateLayout& layout,
              float* w, const float* g, float* h, float* h2) override {
    inner_.update(args, step, layout, w, g, h, h2);
  }
  void advance_step(const StepSchedule& schedule, StepState* state) override {
    inner_.advance_step(schedule, state);
  }

 protected:
  std::unique_ptr<Backend> owned_;  // null when forwarding to a backend given by the caller
  Backend& inner_;
};

}  // namespace lamina::testing

#include "forwarding_catalogue.hpp"  // NOLINT(build/include_order): needs the class above

namespace lamina::testing {

class ForwardingBackend : public CatalogueForwardingBackend {
 public:
  using CatalogueForwardingBackend::CatalogueForwardingBackend;
  using CoreForwardingBackend::activation_backward;
  using CoreForwardingBackend::activation_forward;
  using CoreForwardingBackend::axpby;
  using CoreForwardingBackend::dropout_forward;
  using CoreForwardingBackend::mul;
  using CoreForwardingBackend::gemm;
  using CoreForwardingBackend::linear_bias_backward;
  using CoreForwardingBackend::linear_forward;
  bool supports_half(Half f) const override { return inner_.supports_half(f); }
  void gemm(Half f, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
            const uint16_t* a, const uint16_t* b, float beta, float* c) override {
    inner_.gemm(f, ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void gemm(Half f, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
            const uint16_t* a, const uint16_t* b, float beta, uint16_t* c) override {
    inner_.gemm(f, ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void linear_forward(Half f, int64_t rows, int64_t n, int64_t k, const uint16_t* x,
                      const uint16_t* w, const float* bias, bool relu, uint16_t* y) override {
    inner_.linear_forward(f, rows, n, k, x, w, bias, relu, y);
  }
  void linear_bias_backward(Half f, int64_t rows, int64_t n, const uint16_t* y,
                            const uint16_t* dy, uint16_t* dz, float* db) override {
    inner_.linear_bias_backward(f, rows, n, y, dy, dz, db);
  }
  void activation_forward(Half f, Activation a, int64_t n, float slope, const uint16_t* x,
                          uint16_t* y) override {
    inner_.activation_forward(f, a, n, slope, x, y);
  }
  void activation_backward(Half f, Activation a, int64_t n, float slope, const uint16_t* y,
                           const uint16_t* dy, uint16_t* dx) override {
    inner_.activation_backward(f, a, n, slope, y, dy, dx);
  }
  void axpby(Half f, int64_t n, float alpha, const uint16_t* x, float beta,
             uint16_t* y) override {
    inner_.axpby(f, n, alpha, x, beta, y);
  }
  void mul(Half f, int64_t n, const uint16_t* a, const float* b, uint16_t* y) override {
    inner_.mul(f, n, a, b, y);
  }
  void mul(Half f, int64_t n, const uint16_t* a, const uint16_t* b, uint16_t* y) override {
    inner_.mul(f, n, a, b, y);
  }
  void dropout_forward(Half f, int64_t n, float ratio, uint64_t seed, uint64_t offset,
                       PassCounter* counter, const uint16_t* x, float* mask,
                       uint16_t* y) override {
    inner_.dropout_forward(f, n, ratio, seed, offset, counter, x, mask, y);
  }
  bool has_side_lane() const override { return inner_.has_side_lane(); }
  void open_side_lane() override { inner_.open_side_lane(); }
  void close_side_lane() override { inner_.close_side_lane(); }
  void to_side_lane() override { inner_.to_side_lane(); }
  void to_main_lane() override { inner_.to_main_lane(); }
  void conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* b,
                    float* y) override {
    inner_.conv_forward(g, x, w, b, y);
  }
  void conv_backward_data(const ConvGeometry& g, const float* w, const float* dy,
                          float* dx) override {
    inner_.conv_backward_data(g, w, dy, dx);
  }
  void conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                            float* db) override {
    inner_.conv_backward_filter(g, x, dy, dw, db);
  }
  void pool_forward(PoolMethod m, const PoolGeometry& g, const float* x, float* y,
                    int32_t* mask) override {
    inner_.pool_forward(m, g, x, y, mask);
  }
  void pool_backward(PoolMethod m, const PoolGeometry& g, const float* dy, const int32_t* mask,
                     float* dx) override {
    inner_.pool_backward(m, g, dy, mask, dx);
  }
  void stochastic_pool_forward(const PoolGeometry& g, uint64_t seed, uint64_t offset,
                               uint64_t per_pass, PassCounter* counter, const float* x,
                               float* y, int32_t* mask) override {
    inner_.stochastic_pool_forward(g, seed, offset, per_pass, counter, x, y, mask);
  }
  void stochastic_pool_test(const PoolGeometry& g, const float* x, float* y) override {
    inner_.stochastic_pool_test(g, x, y);
  }
  void stochastic_pool_test_backward(const PoolGeometry& g, const float* x, const float* dy,
                                     float* dx) override {
    inner_.stochastic_pool_test_backward(g, x, dy, dx);
  }
  void channel_moments(int64_t o, int64_t c, int64_t i, const float* x, float* mean,
                       float* var) override {
    inner_.channel_moments(o, c, i, x, mean, var);
  }
  void batch_norm_forward(int64_t o, int64_t c, int64_t i, float eps, const float* x,
                          const float* mean, const float* var, float* y, float* inv_std,
                          float* kept) override {
    inner_.batch_norm_forward(o, c, i, eps, x, mean, var, y, inv_std, kept);
  }
  void batch_norm_inference(int64_t o, int64_t c, int64_t i, float eps, const float* x,
                            const float* mean_sum, const float* var_sum, const float* factor,
                            float* y, float* mean, float* inv_std) override {
    inner_.batch_norm_inference(o, c, i, eps, x, mean_sum, var_sum, factor, y, mean, inv_std);
  }
  void batch_norm_backward(int64_t o, int64_t c, int64_t i, const float* y, const float* dy,
                           const float* inv_std, float* dx) override {
    inner_.batch_norm_backward(o, c, i, y, dy, inv_std, dx);
  }
  void batch_norm_scale_forward(int64_t o, int64_t c, int64_t i, float eps, const float* x,
                                const float* mean, const float* var, const float* scale,
                                const float* bias, bool relu, float* y, float* inv_std,
                                float* kept) override {
    inner_.batch_norm_scale_forward(o, c, i, eps, x, mean, var, scale, bias, relu, y, inv_std,
                                    kept);
  }
  void batch_norm_scale_sums(int64_t o, int64_t c, int64_t i, const float* kept,
                             const float* dy, const float* scale, const float* bias, bool relu,
                             float* means, float* dscale, float* dbias) override {
    inner_.batch_norm_scale_sums(o, c, i, kept, dy, scale, bias, relu, means, dscale, dbias);
  }
  void batch_norm_scale_backward(int64_t o, int64_t c, int64_t i, const float* kept,
                                 const float* dy, const float* inv_std, const float* scale,
                                 const float* bias, bool relu, const float* means,
                                 float* dx) override {
    inner_.batch_norm_scale_backward(o, c, i, kept, dy, inv_std, scale, bias, relu, means, dx);
  }
  void channel_affine(int64_t o, int64_t c, int64_t i, const float* x, const float* scale,
                      const float* bias, float* y) override {
    inner_.channel_affine(o, c, i, x, scale, bias, y);
  }
  void channel_reduce(int64_t o, int64_t c, int64_t i, const float* a, const float* b,
                      float* out) override {
    inner_.channel_reduce(o, c, i, a, b, out);
  }
  void scale_gradients(int64_t o, int64_t c, int64_t i, const float* dy, const float* x,
                       float* dscale, float* dbias) override {
    inner_.scale_gradients(o, c, i, dy, x, dscale, dbias);
  }
  void copy_rows(int64_t rows, int64_t cols, const float* src, int64_t src_stride, float* dst,
                 int64_t dst_stride) override {
    inner_.copy_rows(rows, cols, src, src_stride, dst, dst_stride);
  }
  void eltwise_max_forward(int64_t n, int index, const float* x, float* y,
                           int32_t* mask) override {
    inner_.eltwise_max_forward(n, index, x, y, mask);
  }
  void eltwise_max_backward(int64_t n, int index, const float* dy, const int32_t* mask,
                            float* dx) override {
    inner_.eltwise_max_backward(n, index, dy, mask, dx);
  }
  void conv_forward(Half f, const ConvGeometry& g, const uint16_t* x, const uint16_t* w,
                    const float* b, uint16_t* y) override {
    inner_.conv_forward(f, g, x, w, b, y);
  }
  void conv_backward_data(Half f, const ConvGeometry& g, const uint16_t* w, const uint16_t* dy,
                          uint16_t* dx) override {
    inner_.conv_backward_data(f, g, w, dy, dx);
  }
  void conv_backward_filter(Half f, const ConvGeometry& g, const uint16_t* x,
                            const uint16_t* dy, float* dw, float* db) override {
    inner_.conv_backward_filter(f, g, x, dy, dw, db);
  }
  void pool_forward(Half f, PoolMethod m, const PoolGeometry& g, const uint16_t* x, uint16_t* y,
                    int32_t* mask) override {
    inner_.pool_forward(f, m, g, x, y, mask);
  }
  void pool_backward(Half f, PoolMethod m, const PoolGeometry& g, const uint16_t* dy,
                     const int32_t* mask, uint16_t* dx) override {
    inner_.pool_backward(f, m, g, dy, mask, dx);
  }
  void channel_affine(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* x,
                      const float* scale, const float* bias, uint16_t* y) override {
    inner_.channel_affine(f, o, c, i, x, scale, bias, y);
  }
  void channel_reduce(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* a,
                      const uint16_t* b, float* out) override {
    inner_.channel_reduce(f, o, c, i, a, b, out);
  }
  void scale_gradients(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* dy,
                       const uint16_t* x, float* dscale, float* dbias) override {
    inner_.scale_gradients(f, o, c, i, dy, x, dscale, dbias);
  }
  void channel_moments(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* x, float* mean,
                       float* var) override {
    inner_.channel_moments(f, o, c, i, x, mean, var);
  }
  void batch_norm_forward(Half f, int64_t o, int64_t c, int64_t i, float eps, const uint16_t* x,
                          const float* mean, const float* var, uint16_t* y, float* inv_std,
                          uint16_t* kept) override {
    inner_.batch_norm_forward(f, o, c, i, eps, x, mean, var, y, inv_std, kept);
  }
  void batch_norm_inference(Half f, int64_t o, int64_t c, int64_t i, float eps,
                            const uint16_t* x, const float* mean_sum, const float* var_sum,
                            const float* factor, uint16_t* y, float* mean,
                            float* inv_std) override {
    inner_.batch_norm_inference(f, o, c, i, eps, x, mean_sum, var_sum, factor, y, mean,
                                inv_std);
  }
  void batch_norm_backward(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* y,
                           const uint16_t* dy, const float* inv_std, uint16_t* dx) override {
    inner_.batch_norm_backward(f, o, c, i, y, dy, inv_std, dx);
  }
  void batch_norm_scale_forward(Half f, int64_t o, int64_t c, int64_t i, float eps,
                                const uint16_t* x, const float* mean, const float* var,
                                const float* scale, const float* bias, bool relu, uint16_t* y,
                                float* inv_std, uint16_t* kept) override {
    inner_.batch_norm_scale_forward(f, o, c, i, eps, x, mean, var, scale, bias, relu, y,
                                    inv_std, kept);
  }
  void batch_norm_scale_sums(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* kept,
                             const uint16_t* dy, const float* scale, const float* bias,
                             bool relu, float* means, float* dscale, float* dbias) override {
    inner_.batch_norm_scale_sums(f, o, c, i, kept, dy, scale, bias, relu, means, dscale,
                                 dbias);
  }
  void batch_norm_scale_backward(Half f, int64_t o, int64_t c, int64_t i, const uint16_t* kept,
                                 const uint16_t* dy, const float* inv_std, const float* scale,
                                 const float* bias, bool relu, const float* means,
                                 uint16_t* dx) override {
    inner_.batch_norm_scale_backward(f, o, c, i, kept, dy, inv_std, scale, bias, relu, means,
                                     dx);
  }
  void copy_rows(int64_t rows, int64_t cols, const uint16_t* src, int64_t src_stride,
                 uint16_t* dst, int64_t dst_stride) override {
    inner_.copy_rows(rows, cols, src, src_stride, dst, dst_stride);
  }
  void eltwise_max_forward(Half f, int64_t n, int index, const uint16_t* x, uint16_t* y,
                           int32_t* mask) override {
    inner_.eltwise_max_forward(f, n, index, x, y, mask);
  }
  void eltwise_max_backward(Half f, int64_t n, int index, const uint16_t* dy,
                            const int32_t* mask, uint16_t* dx) override {
    inner_.eltwise_max_backward(f, n, index, dy, mask, dx);
  }
  bool supports(Operation op) const override { return inner_.supports(op); }
};

// Counts what crosses between the host and the backend's memory: copy_to_host,
// copy_from_host and upload (no other operation reads or writes host memory on a device).
// Wrap any backend (CUDA too) to show that a sequence of operations moves nothing, or
// exactly what.
class CountingBackend : public ForwardingBackend {
 public:
  struct Transfers {
    int64_t to_host = 0;
    int64_t from_host = 0;
    int64_t bytes = 0;
  };
  using ForwardingBackend::ForwardingBackend;

  const Transfers& transfers() const { return transfers_; }

  void copy_to_host(size_t bytes, const void* src, void* dst) override {
    count(transfers_.to_host, bytes);
    inner_.copy_to_host(bytes, src, dst);
  }
  void copy_from_host(size_t bytes, const void* src, void* dst) override {
    count(transfers_.from_host, bytes);
    inner_.copy_from_host(bytes, src, dst);
  }
  void upload(size_t bytes, const void* src, void* dst) override {
    count(transfers_.from_host, bytes);
    inner_.upload(bytes, src, dst);
  }

 private:
  void count(int64_t& direction, size_t bytes) {
    ++direction;
    transfers_.bytes += int64_t(bytes);
  }

  Transfers transfers_;
};

}  // namespace lamina::testing
