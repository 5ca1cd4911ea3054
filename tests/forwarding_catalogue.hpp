// The forwarding of the Caffe catalogue's optional operations (backend.hpp), between
// CoreForwardingBackend and ForwardingBackend (forwarding_backend.hpp includes this).
#pragma once

#include <cstdint>

namespace lamina::testing {

class CatalogueForwardingBackend : public CoreForwardingBackend {
 public:
  using CoreForwardingBackend::CoreForwardingBackend;

  void pointwise_forward(const Pointwise& f, int64_t n, const float* x, float* y) override {
    inner_.pointwise_forward(f, n, x, y);
  }
  void pointwise_backward(const Pointwise& f, int64_t n, const float* x, const float* y,
                          const float* dy, float* dx) override {
    inner_.pointwise_backward(f, n, x, y, dy, dx);
  }
  void prelu_forward(int64_t outer, int64_t channels, int64_t inner, const float* x,
                     const float* slope, float* y) override {
    inner_.prelu_forward(outer, channels, inner, x, slope, y);
  }
  void prelu_backward(int64_t outer, int64_t channels, int64_t inner, const float* x,
                      const float* dy, const float* slope, float* dx, float* dslope) override {
    inner_.prelu_backward(outer, channels, inner, x, dy, slope, dx, dslope);
  }
  void transpose(int64_t outer, int64_t rows, int64_t cols, const float* x, float* y) override {
    inner_.transpose(outer, rows, cols, x, y);
  }
  void copy_block(const BlockCopy& box, const float* src, float* dst, bool accumulate) override {
    inner_.copy_block(box, src, dst, accumulate);
  }
  void reduce_middle(ReduceOp op, int64_t outer, int64_t mid, int64_t inner, float coeff,
                     const float* x, float* y) override {
    inner_.reduce_middle(op, outer, mid, inner, coeff, x, y);
  }
  void reduce_middle_backward(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                              float coeff, const float* x, const float* dy, float* dx) override {
    inner_.reduce_middle_backward(op, outer, mid, inner, coeff, x, dy, dx);
  }
  void argmax(int64_t outer, int64_t channels, int64_t inner, int64_t top_k, const float* x,
              float* index, float* value) override {
    inner_.argmax(outer, channels, inner, top_k, x, index, value);
  }
  void gather_rows(int64_t rows, int64_t cols, const float* index, int64_t src_rows,
                   const float* src, float* dst) override {
    inner_.gather_rows(rows, cols, index, src_rows, src, dst);
  }
  void scatter_add_rows(int64_t rows, int64_t cols, const float* index, int64_t dst_rows,
                        const float* src, float* dst) override {
    inner_.scatter_add_rows(rows, cols, index, dst_rows, src, dst);
  }
  void lrn_forward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args, const float* x,
                   float* scale, float* y) override {
    inner_.lrn_forward(n, c, inner, args, x, scale, y);
  }
  void lrn_backward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args, const float* x,
                    const float* y, const float* scale, const float* dy, float* dx) override {
    inner_.lrn_backward(n, c, inner, args, x, y, scale, dy, dx);
  }
  void im2col(const ConvGeometry& g, const float* x, float* col) override {
    inner_.im2col(g, x, col);
  }
  void col2im(const ConvGeometry& g, const float* col, float* dx) override {
    inner_.col2im(g, col, dx);
  }
  void sigmoid_cross_entropy_forward(int64_t n, const float* x, const float* target,
                                     const LossOptions& options, float* loss,
                                     float* norm) override {
    inner_.sigmoid_cross_entropy_forward(n, x, target, options, loss, norm);
  }
  void sigmoid_cross_entropy_backward(int64_t n, const float* x, const float* target,
                                      const LossOptions& options, const float* norm,
                                      const float* dloss, float* dx) override {
    inner_.sigmoid_cross_entropy_backward(n, x, target, options, norm, dloss, dx);
  }
  void hinge_loss_forward(int64_t rows, int64_t cols, int p, const float* x,
                          const float* labels, float* margin, float* loss) override {
    inner_.hinge_loss_forward(rows, cols, p, x, labels, margin, loss);
  }
  void hinge_loss_backward(int64_t rows, int64_t cols, int p, const float* margin,
                           const float* labels, const float* dloss, float* dx) override {
    inner_.hinge_loss_backward(rows, cols, p, margin, labels, dloss, dx);
  }
  void contrastive_loss_forward(int64_t rows, int64_t cols, float margin, bool legacy,
                                const float* a, const float* b, const float* similar,
                                float* diff, float* dist_sq, float* loss) override {
    inner_.contrastive_loss_forward(rows, cols, margin, legacy, a, b, similar, diff, dist_sq,
                                    loss);
  }
  void contrastive_loss_backward(int64_t rows, int64_t cols, float margin, bool legacy,
                                 float sign, const float* diff, const float* dist_sq,
                                 const float* similar, const float* dloss,
                                 float* dx) override {
    inner_.contrastive_loss_backward(rows, cols, margin, legacy, sign, diff, dist_sq, similar,
                                     dloss, dx);
  }
  void multinomial_logistic_loss_forward(int64_t rows, int64_t cols, const float* prob,
                                         const float* labels, float* loss) override {
    inner_.multinomial_logistic_loss_forward(rows, cols, prob, labels, loss);
  }
  void multinomial_logistic_loss_backward(int64_t rows, int64_t cols, const float* prob,
                                          const float* labels, const float* dloss,
                                          float* dx) override {
    inner_.multinomial_logistic_loss_backward(rows, cols, prob, labels, dloss, dx);
  }
  void infogain_loss_forward(int64_t rows, int64_t cols, const float* prob, const float* labels,
                             const float* infogain, const LossOptions& options, float* loss,
                             float* norm) override {
    inner_.infogain_loss_forward(rows, cols, prob, labels, infogain, options, loss, norm);
  }
  void infogain_loss_backward(int64_t rows, int64_t cols, const float* prob,
                              const float* labels, const float* infogain,
                              const LossOptions& options, const float* norm,
                              const float* dloss, float* dx) override {
    inner_.infogain_loss_backward(rows, cols, prob, labels, infogain, options, norm, dloss,
                                  dx);
  }
};

}  // namespace lamina::testing
