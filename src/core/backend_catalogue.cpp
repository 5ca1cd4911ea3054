// The defaults of the Caffe catalogue's optional groups (backend.hpp): each throws the Error
// naming the backend and the operation, for a backend that does not implement the group.
#include "lamina/backend.hpp"

namespace lamina {

void Backend::pointwise_forward(const Pointwise&, int64_t, const float*, float*) {
  unsupported(Operation::kPointwise, "pointwise_forward");
}
void Backend::pointwise_backward(const Pointwise&, int64_t, const float*, const float*,
                                 const float*, float*) {
  unsupported(Operation::kPointwise, "pointwise_backward");
}
void Backend::prelu_forward(int64_t, int64_t, int64_t, const float*, const float*, float*) {
  unsupported(Operation::kPointwise, "prelu_forward");
}
void Backend::prelu_backward(int64_t, int64_t, int64_t, const float*, const float*,
                             const float*, float*, float*) {
  unsupported(Operation::kPointwise, "prelu_backward");
}

void Backend::transpose(int64_t, int64_t, int64_t, const float*, float*) {
  unsupported(Operation::kTensorOps, "transpose");
}
void Backend::copy_block(const BlockCopy&, const float*, float*, bool) {
  unsupported(Operation::kTensorOps, "copy_block");
}
void Backend::reduce_middle(ReduceOp, int64_t, int64_t, int64_t, float, const float*, float*) {
  unsupported(Operation::kTensorOps, "reduce_middle");
}
void Backend::reduce_middle_backward(ReduceOp, int64_t, int64_t, int64_t, float, const float*,
                                     const float*, float*) {
  unsupported(Operation::kTensorOps, "reduce_middle_backward");
}
void Backend::argmax(int64_t, int64_t, int64_t, int64_t, const float*, float*, float*) {
  unsupported(Operation::kTensorOps, "argmax");
}
void Backend::gather_rows(int64_t, int64_t, const float*, int64_t, const float*, float*) {
  unsupported(Operation::kTensorOps, "gather_rows");
}
void Backend::scatter_add_rows(int64_t, int64_t, const float*, int64_t, const float*, float*) {
  unsupported(Operation::kTensorOps, "scatter_add_rows");
}

void Backend::lrn_forward(int64_t, int64_t, int64_t, const LrnArgs&, const float*, float*,
                          float*) {
  unsupported(Operation::kLrn, "lrn_forward");
}
void Backend::lrn_backward(int64_t, int64_t, int64_t, const LrnArgs&, const float*,
                           const float*, const float*, const float*, float*) {
  unsupported(Operation::kLrn, "lrn_backward");
}

void Backend::im2col(const ConvGeometry&, const float*, float*) {
  unsupported(Operation::kIm2col, "im2col");
}
void Backend::col2im(const ConvGeometry&, const float*, float*) {
  unsupported(Operation::kIm2col, "col2im");
}

void Backend::sigmoid_cross_entropy_forward(int64_t, const float*, const float*,
                                            const LossOptions&, float*, float*) {
  unsupported(Operation::kCaffeLosses, "sigmoid_cross_entropy_forward");
}
void Backend::sigmoid_cross_entropy_backward(int64_t, const float*, const float*,
                                             const LossOptions&, const float*, const float*,
                                             float*) {
  unsupported(Operation::kCaffeLosses, "sigmoid_cross_entropy_backward");
}
void Backend::hinge_loss_forward(int64_t, int64_t, int, const float*, const float*, float*,
                                 float*) {
  unsupported(Operation::kCaffeLosses, "hinge_loss_forward");
}
void Backend::hinge_loss_backward(int64_t, int64_t, int, const float*, const float*,
                                  const float*, float*) {
  unsupported(Operation::kCaffeLosses, "hinge_loss_backward");
}
void Backend::contrastive_loss_forward(int64_t, int64_t, float, bool, const float*,
                                       const float*, const float*, float*, float*, float*) {
  unsupported(Operation::kCaffeLosses, "contrastive_loss_forward");
}
void Backend::contrastive_loss_backward(int64_t, int64_t, float, bool, float, const float*,
                                        const float*, const float*, const float*, float*) {
  unsupported(Operation::kCaffeLosses, "contrastive_loss_backward");
}
void Backend::multinomial_logistic_loss_forward(int64_t, int64_t, const float*, const float*,
                                                float*) {
  unsupported(Operation::kCaffeLosses, "multinomial_logistic_loss_forward");
}
void Backend::multinomial_logistic_loss_backward(int64_t, int64_t, const float*, const float*,
                                                 const float*, float*) {
  unsupported(Operation::kCaffeLosses, "multinomial_logistic_loss_backward");
}
void Backend::infogain_loss_forward(int64_t, int64_t, const float*, const float*, const float*,
                                    const LossOptions&, float*, float*) {
  unsupported(Operation::kCaffeLosses, "infogain_loss_forward");
}
void Backend::infogain_loss_backward(int64_t, int64_t, const float*, const float*,
                                     const float*, const LossOptions&, const float*,
                                     const float*, float*) {
  unsupported(Operation::kCaffeLosses, "infogain_loss_backward");
}

}  // namespace lamina
