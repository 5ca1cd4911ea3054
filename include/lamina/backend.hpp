// The Backend: every operation a layer or solver needs, implemented once per device.
//
// Layers are written once against this interface; NativeBackend (OpenBLAS, host memory) and
// CudaBackend (cuBLAS, cuDNN, Lamina's kernels, device memory) implement it. All pointers
// are in the backend's own memory unless the parameter name says host. Operations are
// asynchronous on devices: only copy_to_host and synchronize wait for the device.
// Matrices are row-major.
//
// What is passed by value and what by pointer: arguments passed by value are constants of
// the net (shapes, ratios, seeds, the solver's hyperparameters), the same at every pass.
// Everything that changes from one pass or iteration to the next lives in backend memory and
// is advanced there by the operation that uses it: the solver's StepState (iteration,
// learning rate, bias correction, gradient scale, loss slot; step_state.hpp), a layer's
// PassCounter (data cursor, dropout offset; pass_counter.hpp), and scalars one operation
// produces for another (a loss, its normaliser, a norm), which are never read back. So a
// training step is the same sequence of launches with the same arguments every iteration,
// which the CUDA backend captures once and replays (capture(), below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lamina/pass_counter.hpp"
#include "lamina/step_state.hpp"

namespace lamina {

enum class Transpose { kNo, kYes };

// The arithmetic of products (gemm, linear_forward and the convolutions; Backend::set_math).
// kFP32: full FP32. kTF32: each operand rounded to TF32 (FP32's 8 exponent bits, 10 of its
// 23 mantissa bits), products accumulated in FP32: on tensor cores on CUDA.
enum class Math { kFP32, kTF32 };

inline const char* math_name(Math math) { return math == Math::kTF32 ? "TF32" : "FP32"; }

// The 16-bit formats values can be stored in (Backend::to_half; rounding.hpp).
enum class Half { kBF16, kFP16 };

enum class Activation { kReLU, kSigmoid, kTanH };

// How a loss is divided; mirrors LossParameter.normalization.
enum class Normalization { kFull, kValid, kBatchSize, kNone };

struct LossOptions {
  bool has_ignore_label = false;
  int ignore_label = 0;
  Normalization normalization = Normalization::kValid;
  // kBatchSize divides by this many; 0: by the rows. (A loss over an axis with positions
  // after it has rows = batch x positions, and Caffe divides by the batch.)
  int64_t batch = 0;
};

// One learnable parameter inside the flat parameter arena, with its solver multipliers.
struct ParamSegment {
  int64_t offset;  // in floats, from the start of the arena
  int64_t count;
  float lr_mult;
  float decay_mult;
};

constexpr int64_t kArenaBlock = 64;  // floats; every parameter starts on a block boundary

// The parameter arena as the fused update reads it; all pointers in backend memory. The
// update covers elements [first, first + n) of the arena: all of it (ParamArena::layout) or
// a part (ParamArena::layout_part); the arrays passed with the layout point at the arena's
// start either way.
struct UpdateLayout {
  int64_t n = 0;                            // floats updated, a multiple of kArenaBlock
  const ParamSegment* segments = nullptr;   // num_segments entries
  int num_segments = 0;
  const int32_t* block_segment = nullptr;   // an entry per kArenaBlock floats of the arena:
                                            // the segment whose elements block b holds, -1
                                            // for padding only
  int64_t first = 0;                        // a multiple of kArenaBlock
};

// The block table of segments laid out on kArenaBlock boundaries in an arena of n floats
// (src/core/update_layout.cpp). The segments must be sorted by offset, each starting on a
// block boundary, without overlap, inside the arena: the caller lays them out (CHECKed).
std::vector<int32_t> block_segments(const std::vector<ParamSegment>& segments, int64_t n);

enum class UpdateRule { kSGD, kNesterov, kAdam, kAdamW, kRMSProp, kAdaGrad, kAdaDelta };
enum class Regularization { kL2, kL1 };

// The constants of a fused solver update: the same every iteration, passed by value. What
// changes from one iteration to the next (the rate, Adam's bias correction, the gradient
// scale) is read from a StepState in backend memory (step_state.hpp).
struct UpdateArgs {
  UpdateRule rule = UpdateRule::kSGD;
  float momentum = 0;        // SGD/Nesterov momentum, Adam's beta1, AdaDelta's decay
  float momentum2 = 0.999f;  // Adam's beta2, RMSProp's decay
  float delta = 1e-8f;       // Adam, RMSProp, AdaGrad, AdaDelta epsilon
  float weight_decay = 0;    // before decay_mult
  Regularization regularization = Regularization::kL2;
  // The weights' 16-bit copy (ParamArena::half_copy) in half_format, which the update
  // writes with each weight it changes, so that it never needs a pass of its own; null:
  // none. Arena-start pointer, like the weights.
  uint16_t* half_copy = nullptr;
  Half half_format = Half::kBF16;
};

// A 2-D convolution, NCHW. x (n, c, h, w); weight (k, c / groups, kh, kw); bias (k);
// y (n, k, out_h, out_w), out = (in + 2 pad - (dilation (kernel - 1) + 1)) / stride + 1.
struct ConvGeometry {
  int64_t n, c, h, w;
  int64_t k, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t groups;
  int64_t out_h, out_w;
  // Element counts of x, weight and y.
  int64_t input_count() const { return n * c * h * w; }
  int64_t weight_count() const { return k * (c / groups) * kh * kw; }
  int64_t output_count() const { return n * k * out_h * out_w; }
};

enum class PoolMethod { kMax, kAverage };

// 2-D pooling, NCHW: x (n, c, h, w) -> y (n, c, out_h, out_w); the caller chooses out_h/out_w
// (Caffe rounds up). Window (oh, ow) covers rows [oh stride_h - pad_h, + kh) and columns
// likewise, clipped to the input. Average divides by the window's size clipped to the
// padded input [-pad, in + pad), as Caffe does.
struct PoolGeometry {
  int64_t n, c, h, w;
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w;
  int64_t out_h, out_w;
};

// An element-wise function of the Caffe layers of that name (kPointwise), with its constants
// a, b, c (the layer computes them from its parameters):
//   kAbsVal     y = |x|
//   kBNLL       y = log(1 + exp(x)), as x + log(1 + exp(-x)) for x > 0
//   kPower      y = (c + b x)^a                      (a = power, b = scale, c = shift)
//   kExp        y = b exp(a x)                       (a = ln(base) scale, b = base^shift)
//   kLog        y = c ln(b + a x)                    (a = scale, b = shift, c = 1 / ln(base))
//   kThreshold  y = x > a ? 1 : 0                    (gradient 0)
//   kClip       y = min(max(x, a), b)                (gradient where a <= x <= b)
//   kSwish      y = x sigmoid(a x)
//   kELU        y = x > 0 ? x : a (exp(x) - 1)
enum class PointwiseFn { kAbsVal, kBNLL, kPower, kExp, kLog, kThreshold, kClip, kSwish, kELU };
struct Pointwise {
  PointwiseFn fn;
  float a = 0, b = 0, c = 0;
};

// A box of up to kMaxBlockAxes axes copied between two strided arrays (kTensorOps): for every
// index i (i_0 .. i_{axes-1}, i_d < shape[d]), dst[sum i_d dst_stride[d]] = (or +=)
// src[sum i_d src_stride[d]]; strides in elements, a stride of 0 repeats. No two indices
// may name the same dst element.
constexpr int kMaxBlockAxes = 6;
struct BlockCopy {
  int axes = 0;
  int64_t shape[kMaxBlockAxes] = {};
  int64_t src_stride[kMaxBlockAxes] = {};
  int64_t dst_stride[kMaxBlockAxes] = {};
};

// What reduce_middle sums: the values, their absolute values, or their squares.
enum class ReduceOp { kSum, kAbsSum, kSumSquares };

// Local response normalisation across channels (Caffe's ACROSS_CHANNELS): over x (n, c,
// inner), scale = k + alpha / size * (the sum of x^2 over the `size` channels centred on
// each: c - (size - 1) / 2 .. c + size / 2, clipped), y = x scale^-beta.
struct LrnArgs {
  int64_t size = 5;
  float alpha = 1, beta = 0.75f, k = 1;
};

// The optional groups of operations (the convolutional section below); a layer lists those it
// needs (Layer::operations()) and the net asks supports() when it is built.
enum class Operation {
  kConvolution,
  kPooling,
  kBatchNorm,
  kChannelAffine,
  kRowCopy,
  kEltwiseMax,
  kBatchNormScale,  // BatchNorm with the Scale it absorbed; without it, the two layers run
  kPointwise,       // pointwise_*, prelu_*
  kTensorOps,       // transpose, copy_block, reduce_middle*, argmax, gather/scatter rows
  kLrn,             // lrn_*
  kIm2col,          // im2col, col2im
  kCaffeLosses,     // the losses of the Caffe catalogue section
};

inline const char* operation_name(Operation op) {
  switch (op) {
    case Operation::kConvolution: return "convolution";
    case Operation::kPooling: return "pooling";
    case Operation::kBatchNorm: return "batch normalisation";
    case Operation::kChannelAffine: return "per-channel affine";
    case Operation::kRowCopy: return "strided row copies";
    case Operation::kEltwiseMax: return "element-wise max";
    case Operation::kBatchNormScale: return "batch normalisation with scale";
    case Operation::kPointwise: return "pointwise functions";
    case Operation::kTensorOps: return "tensor copies and reductions";
    case Operation::kLrn: return "local response normalisation";
    case Operation::kIm2col: return "im2col";
    case Operation::kCaffeLosses: return "Caffe's losses";
  }
  return "unknown";
}

// Operations recorded by Backend::capture, launched again as one unit.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
  // Runs the recorded operations once, with the arguments they were recorded with,
  // asynchronously like the operations themselves.
  virtual void launch() = 0;
  // The operations recorded (kernels, copies, library calls: the CUDA graph's nodes).
  virtual int64_t operations() const = 0;
  // False once memory the recording refers to has been replaced (a workspace grew): capture
  // again before launching.
  virtual bool valid() const = 0;
};

// Passes once the uploads issued before its last record() have run (UploadLane::upload), so
// the host may write their source memory again.
class UploadFence {
 public:
  virtual ~UploadFence() = default;
  // Marks the uploads issued so far on the lane.
  virtual void record() = 0;
  // Blocks the calling thread (any thread) until they have run. Passes at once if record()
  // was never called.
  virtual void wait() = 0;
};

// Uploads that run beside the operations (Backend::make_upload_lane; CUDA: a copy stream):
// a data layer copies the batches of the passes to come from pinned host memory while the
// device computes earlier passes. The caller orders them with marks: an upload into memory
// that an earlier operation reads waits for a mark recorded after that operation; the
// operations that read an upload are issued after join().
class UploadLane {
 public:
  virtual ~UploadLane() = default;
  // Records mark m (0 <= m < the lane's marks): the operations issued so far.
  virtual void mark(int m) = 0;
  // The uploads issued from now on wait for what mark m recorded (nothing if never recorded).
  virtual void wait_for(int m) = 0;
  // Copies from pinned host memory (Backend::allocate_pinned) to dst without the host
  // waiting: pinned_src must stay unchanged until a fence recorded after it passes. Not
  // while capturing (a recording would keep the address, not the values).
  virtual void upload(size_t bytes, const void* pinned_src, void* dst) = 0;
  // The operations issued from now on wait for the uploads issued so far.
  virtual void join() = 0;
  // A fence for this lane's uploads.
  virtual std::unique_ptr<UploadFence> make_fence() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "native", "cuda:0"
  virtual bool is_host() const = 0;      // true when its memory is ordinary host memory

  // ---- memory (sizes in bytes) ----
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  virtual void copy(size_t bytes, const void* src, void* dst) = 0;  // within this backend
  virtual void copy_to_host(size_t bytes, const void* src, void* host_dst) = 0;  // waits
  virtual void copy_from_host(size_t bytes, const void* host_src, void* dst) = 0;
  virtual void zero(size_t bytes, void* p) = 0;
  virtual void fill(int64_t n, float value, float* x) = 0;
  virtual void synchronize() = 0;
  // Host memory for what a layer prepares on the host every pass (a data layer's batches):
  // page-locked on CUDA, so that an upload from it is a copy the host does not wait for;
  // ordinary memory elsewhere (the defaults).
  virtual void* allocate_pinned(size_t bytes);
  virtual void deallocate_pinned(void* p) noexcept;
  // A lane for uploads beside the operations, with `marks` marks. The default runs each
  // upload in operation order with copy_from_host (which has copied when it returns), so
  // its marks, joins and fences have nothing to do.
  virtual std::unique_ptr<UploadLane> make_upload_lane(int marks);

  // ---- the arithmetic of products ----
  // gemm, linear_forward and conv_* compute in math(); every other operation in FP32. The
  // net sets it around each layer's calls to the layer's precision (MathScope, below), so
  // layers need not know it. Under kTF32 the Native backend rounds the operands to nearest
  // (ties to even) and multiplies in FP32; CUDA runs TF32 tensor-core kernels (cuBLAS's
  // FAST_TF32 compute type, cuDNN's algorithms with tensor-op math allowed), whose rounding
  // and summation order are their own, so the two agree within TF32's precision, not bit for
  // bit.
  virtual bool supports_math(Math math) const { return math == Math::kFP32; }
  virtual void set_math(Math math) { math_ = math; }
  Math math() const { return math_; }

  // ---- BLAS, float32, row-major ----
  // C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, in math()
  virtual void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, const float* b, float beta, float* c) = 0;
  // y = alpha op(A) x + beta y, A (m, n)
  virtual void gemv(Transpose trans_a, int64_t m, int64_t n, float alpha, const float* a,
                    const float* x, float beta, float* y) = 0;
  virtual void axpy(int64_t n, float alpha, const float* x, float* y) = 0;  // y += a x
  virtual void axpby(int64_t n, float alpha, const float* x, float beta,
                     float* y) = 0;                                          // y = a x + b y
  virtual void scal(int64_t n, float alpha, float* x) = 0;
  virtual void mul(int64_t n, const float* a, const float* b, float* y) = 0;  // y = a * b
  // result[0] = x . y, accumulated in double and rounded once; result is in this backend's
  // memory (no wait).
  virtual void dot(int64_t n, const float* x, const float* y, float* result) = 0;

  // ---- 16-bit storage ----
  // y[i] = x[i] in `format`, as its 16 bits: to nearest with ties to even, NaN, overflow and
  // subnormals as rounding.hpp's float_to_bf16 / float_to_fp16 say (every backend gives the
  // same bits). from_half: y[i] = the value of x[i], exactly.
  virtual void to_half(Half format, int64_t n, const float* x, uint16_t* y) = 0;
  virtual void from_half(Half format, int64_t n, const uint16_t* x, float* y) = 0;

  // Layers that run in 16 bits (precision BF16 or FP16) store their inputs, outputs and
  // gradients in `format` and call these: each reads its 16-bit operands as their exact
  // values, computes in FP32 (products accumulate in FP32: tensor cores on CUDA), and rounds
  // every 16-bit result once, to nearest even. Float outputs (a weight or bias gradient)
  // stay FP32. The Native backend computes with the float operations above on the converted
  // operands, so the two agree within the rounding of one 16-bit result where their FP32
  // sums differ in order. Optional: a backend without them says so in supports_half, and
  // the net then refuses 16-bit layers (the defaults throw). A backend whose supports_half
  // says yes implements all of them, and the 16-bit forms of the optional groups it
  // supports(); the net does not check each layer's operations against it.
  virtual bool supports_half(Half /*format*/) const { return false; }
  // As gemm, with A and B in `format` and C in FP32 (float* c) or in `format`.
  virtual void gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const uint16_t* a, const uint16_t* b, float beta,
                    float* c);
  virtual void gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const uint16_t* a, const uint16_t* b, float beta,
                    uint16_t* c);
  // As linear_forward, with x, w and y in `format`; the bias, added before the one rounding
  // of y, stays FP32.
  virtual void linear_forward(Half format, int64_t rows, int64_t n, int64_t k,
                              const uint16_t* x, const uint16_t* w, const float* bias,
                              bool relu, uint16_t* y);
  // As linear_bias_backward, with y, dy and dz in `format` and db in FP32.
  virtual void linear_bias_backward(Half format, int64_t rows, int64_t n, const uint16_t* y,
                                    const uint16_t* dy, uint16_t* dz, float* db);
  // As activation_forward and activation_backward, every array in `format`.
  virtual void activation_forward(Half format, Activation f, int64_t n, float negative_slope,
                                  const uint16_t* x, uint16_t* y);
  virtual void activation_backward(Half format, Activation f, int64_t n, float negative_slope,
                                   const uint16_t* y, const uint16_t* dy, uint16_t* dx);
  // y = alpha x + beta y with x and y in `format`: two FP32 products and their FP32 sum (no
  // fused multiply-add), rounded once; a zero coefficient does not read its operand (beta 0
  // overwrites a y holding NaN). Eltwise SUM and Split.
  virtual void axpby(Half format, int64_t n, float alpha, const uint16_t* x, float beta,
                     uint16_t* y);
  // y = a * b with a and y in `format` and b FP32, or all three in `format`, rounded once
  // (Dropout's backward; Eltwise PROD).
  virtual void mul(Half format, int64_t n, const uint16_t* a, const float* b, uint16_t* y);
  virtual void mul(Half format, int64_t n, const uint16_t* a, const uint16_t* b, uint16_t* y);
  // As dropout_forward with x and y in `format` (the mask FP32): y = x * mask rounded once.
  virtual void dropout_forward(Half format, int64_t n, float ratio, uint64_t seed,
                               uint64_t offset, PassCounter* counter, const uint16_t* x,
                               float* mask, uint16_t* y);

  // ---- neural-network operations ----
  // Labels are class indices stored as floats (the integer part counts), in [0, cols)
  // unless equal to the ignore label. Any other label (negative, NaN, or past the last class
  // when the scores have fewer outputs than the data has classes) is never used as an index:
  // Native throws an Error naming it; CUDA, which cannot stop a kernel, makes the loss NaN
  // and counts the row as wrong for accuracy (the solver's non-finite check reports it).
  // y = f(x); relu's negative_slope is ignored by the other functions. Works in place.
  virtual void activation_forward(Activation f, int64_t n, float negative_slope,
                                  const float* x, float* y) = 0;
  // dx = dy * f'(.) computed from the output y (valid in place, where x was overwritten).
  virtual void activation_backward(Activation f, int64_t n, float negative_slope,
                                   const float* y, const float* dy, float* dx) = 0;
  // Row-wise softmax or log-softmax of x (rows, cols).
  virtual void softmax_forward(int64_t rows, int64_t cols, bool log, const float* x,
                               float* y) = 0;
  virtual void softmax_backward(int64_t rows, int64_t cols, bool log, const float* y,
                                const float* dy, float* dx) = 0;
  // Fused, numerically stable softmax + cross-entropy. prob (rows, cols); labels (rows) hold
  // class indices as floats. Writes loss[0] = -sum log prob[label] / norm and norm[0].
  virtual void softmax_cross_entropy_forward(int64_t rows, int64_t cols, const float* x,
                                             const float* labels, const LossOptions& options,
                                             float* prob, float* loss, float* norm) = 0;
  // dx = (prob - onehot(label)) * dloss[0] / norm[0]; ignored rows get 0.
  virtual void softmax_cross_entropy_backward(int64_t rows, int64_t cols, const float* prob,
                                              const float* labels, const LossOptions& options,
                                              const float* norm, const float* dloss,
                                              float* dx) = 0;
  // Negative log-likelihood of log-probabilities logp (rows, cols).
  virtual void nll_loss_forward(int64_t rows, int64_t cols, const float* logp,
                                const float* labels, const LossOptions& options, float* loss,
                                float* norm) = 0;
  virtual void nll_loss_backward(int64_t rows, int64_t cols, const float* labels,
                                 const LossOptions& options, const float* norm,
                                 const float* dloss, float* dx) = 0;
  // diff = a - b; loss[0] = sum(diff^2) / (2 rows).
  virtual void euclidean_loss_forward(int64_t rows, int64_t cols, const float* a,
                                      const float* b, float* diff, float* loss) = 0;
  // dx = sign * dloss[0] / rows * diff  (sign +1 for a, -1 for b)
  virtual void euclidean_loss_backward(int64_t rows, int64_t cols, float sign,
                                       const float* diff, const float* dloss, float* dx) = 0;
  // out[0] = fraction of non-ignored rows whose label is among the top_k scores of x:
  // fewer than top_k other classes score at least the label's score (Caffe's rule: a tie
  // counts against the label).
  virtual void accuracy(int64_t rows, int64_t cols, int top_k, const float* x,
                        const float* labels, const LossOptions& options, float* out) = 0;
  // Linear layers, with the bias and a following ReLU fused in (the net fuses a Linear and a
  // ReLU that works in place on its output or is its only reader). y (rows, n) =
  // act(x (rows, k) W (n, k)^T + bias (n)), act the ReLU of activation_forward when relu,
  // else the identity; bias may be null. Written with =. The product in math().
  virtual void linear_forward(int64_t rows, int64_t n, int64_t k, const float* x,
                              const float* w, const float* bias, bool relu, float* y) = 0;
  // The gradient through a ReLU after a Linear, and the Linear's bias gradient: with y (the
  // ReLU's output) non-null, dz = y > 0 ? dy : 0 * dy (as activation_backward; dz may be dy);
  // with y null, dz is dy and is not written. db (n, may be null) += the column sums of dz.
  virtual void linear_bias_backward(int64_t rows, int64_t n, const float* y, const float* dy,
                                    float* dz, float* db) = 0;

  // Operations that read and advance a PassCounter (pass_counter.hpp): each pass runs the
  // same launch with the same arguments, and the counter selects this pass's values.
  // Dropout: with p = counter->passes, mask[i] = keep ? 1/(1-ratio) : 0, keep when
  // uniform(seed, offset + p n + i) >= ratio, using the counter-based generator in
  // counter_rng.hpp (identical on every backend); y = x * mask. Then counter->passes + 1.
  virtual void dropout_forward(int64_t n, float ratio, uint64_t seed, uint64_t offset,
                               PassCounter* counter, const float* x, float* mask,
                               float* y) = 0;
  // A data layer's batch: for each top, dst row r = scale * src[order.sample(p, r)] (uint8 ->
  // float) for r < order.batch, p = order.counter->passes. Then order.counter->passes + 1.
  virtual void gather_batch(const BatchOrder& order, const GatherTop& data,
                            const GatherTop& label) = 0;

  // ---- convolutional networks: optional ----
  // Each group is optional: a backend says which it implements in supports(), and the
  // defaults here throw an Error naming the backend and the operation. A new backend needs
  // only the sections above and the solver update.
  // Arrays viewed as (outer, channels, inner) are per-channel along the middle axis.
  // kConvolution, in math(). y = conv(x, weight) + bias (bias may be null). Written with =.
  virtual void conv_forward(const ConvGeometry& g, const float* x, const float* weight,
                            const float* bias, float* y);
  // dx = the gradient w.r.t. x, written with =.
  virtual void conv_backward_data(const ConvGeometry& g, const float* weight, const float* dy,
                                  float* dx);
  // dweight += the gradient w.r.t. weight; dbias += the sum of dy per output channel (dbias
  // may be null).
  virtual void conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy,
                                    float* dweight, float* dbias);
  // kPooling. Max: y = the window's maximum (the first one in row-major order on ties),
  // mask = its index h * w + col within the input plane. Average: mask is unused (may be null).
  virtual void pool_forward(PoolMethod method, const PoolGeometry& g, const float* x, float* y,
                            int32_t* mask);
  // dx = the gradient w.r.t. x, written with =: max routes dy to the arg-max, average
  // spreads it over the window.
  virtual void pool_backward(PoolMethod method, const PoolGeometry& g, const float* dy,
                             const int32_t* mask, float* dx);
  // Stochastic pooling (Zeiler and Fergus; Caffe's STOCHASTIC), FP32, windows as above
  // (Caffe's layers give no pad). Training: window i of the n c out_h out_w draws u =
  // counter_uniform(seed, offset + p per_pass + i), p = counter->passes, and takes the first
  // element in row-major order where the running sum of its window reaches u * the window's
  // sum (sums in double): y = that element, mask = its index as max's. A window where none
  // does (empty, a NaN sum, or some windows with a negative sum) gives y = 0, mask -1. Then
  // counter->passes + 1.
  // pool_backward(kMax, g, dy, mask, dx) is its gradient.
  virtual void stochastic_pool_forward(const PoolGeometry& g, uint64_t seed, uint64_t offset,
                                       uint64_t per_pass, PassCounter* counter, const float* x,
                                       float* y, int32_t* mask);
  // Testing: y = sum x^2 / sum x over the window (in double), 0 where the sum is 0.
  virtual void stochastic_pool_test(const PoolGeometry& g, const float* x, float* y);
  // Its gradient, written with =: dx_j = the sum over the windows holding x_j, in row-major
  // order, of dy (2 x_j - y) / sum x (0 where the sum is 0).
  virtual void stochastic_pool_test_backward(const PoolGeometry& g, const float* x,
                                             const float* dy, float* dx);
  // kBatchNorm. Batch statistics of x (outer, channels, inner): mean[c], and var[c] = the
  // biased variance (divided by outer * inner), both accumulated in double.
  virtual void channel_moments(int64_t outer, int64_t channels, int64_t inner, const float* x,
                               float* mean, float* var);
  // y = (x - mean[c]) * inv_std[c] with inv_std[c] = 1 / sqrt(var[c] + eps), also written;
  // where kept is not null, kept = y too (a layer's copy of y, in the same pass).
  virtual void batch_norm_forward(int64_t outer, int64_t channels, int64_t inner, float eps,
                                  const float* x, const float* mean, const float* var,
                                  float* y, float* inv_std, float* kept);
  // With running statistics kept as Caffe keeps them (sums and a factor, factor[0] in this
  // backend's memory): mean[c] = mean_sum[c] / factor[0] and v = var_sum[c] / factor[0],
  // each divided in double and rounded once (0 when factor[0] is 0, as in Caffe), then as
  // batch_norm_forward with inv_std[c] = 1 / sqrt(v + eps). Writes y, mean and inv_std.
  virtual void batch_norm_inference(int64_t outer, int64_t channels, int64_t inner, float eps,
                                    const float* x, const float* mean_sum,
                                    const float* var_sum, const float* factor, float* y,
                                    float* mean, float* inv_std);
  // Through batch statistics: with y the normalised output and m = outer * inner,
  // dx = inv_std[c] (dy - mean_c(dy) - y mean_c(dy y)).
  virtual void batch_norm_backward(int64_t outer, int64_t channels, int64_t inner,
                                   const float* y, const float* dy, const float* inv_std,
                                   float* dx);
  // kBatchNormScale. Batch normalisation followed by Scale, and with relu by a ReLU of
  // negative_slope 0 (BatchNorm absorbing the layers after it), each result the bits the
  // layers' operations give (where every array is 16-byte aligned, as tensors are: the CUDA
  // sums' order follows the loads' width). Forward: kept = batch_norm_forward's y (inv_std
  // written too), then y = channel_affine(kept, scale, bias) (bias may be null), then with
  // relu y = activation_forward(kReLU, y); y may be x, kept is another array.
  virtual void batch_norm_scale_forward(int64_t outer, int64_t channels, int64_t inner,
                                        float eps, const float* x, const float* mean,
                                        const float* var, const float* scale,
                                        const float* bias, bool relu, float* y,
                                        float* inv_std, float* kept);
  // With d = dy, or with relu activation_backward(kReLU, y, dy) for y the forward's output
  // (computed again from kept, scale and bias), and g = channel_affine(d, scale, null)
  // (Scale's input gradient): means[c] = mean_c(g) and means[channels + c] = mean_c(g kept),
  // batch_norm_backward's means; where dscale is not null, also scale_gradients(d, kept,
  // dscale, dbias) (dbias may be null).
  virtual void batch_norm_scale_sums(int64_t outer, int64_t channels, int64_t inner,
                                     const float* kept, const float* dy, const float* scale,
                                     const float* bias, bool relu, float* means, float* dscale,
                                     float* dbias);
  // dx = batch_norm_backward(kept, g, inv_std) with g as above and the means that
  // batch_norm_scale_sums gave; dx may be dy.
  virtual void batch_norm_scale_backward(int64_t outer, int64_t channels, int64_t inner,
                                         const float* kept, const float* dy,
                                         const float* inv_std, const float* scale,
                                         const float* bias, bool relu, const float* means,
                                         float* dx);
  // kChannelAffine. y = x * scale[c] + bias[c]; a null scale means 1, a null bias 0. Works
  // in place.
  virtual void channel_affine(int64_t outer, int64_t channels, int64_t inner, const float* x,
                              const float* scale, const float* bias, float* y);
  // out[c] += sum over outer and inner of a * b (b null: of a). Scale and bias gradients.
  virtual void channel_reduce(int64_t outer, int64_t channels, int64_t inner, const float* a,
                              const float* b, float* out);
  // A Scale layer's gradients: channel_reduce(dy, x, dscale), then, where dbias is not null,
  // channel_reduce(dy, null, dbias); a backend may read dy once for both (the default calls
  // channel_reduce twice). The sums are the same either way (on CUDA where the arrays are
  // 16-byte aligned, as tensors are).
  virtual void scale_gradients(int64_t outer, int64_t channels, int64_t inner, const float* dy,
                               const float* x, float* dscale, float* dbias);
  // kRowCopy. Row r of dst (rows, cols) at dst + r * dst_stride = row r of src at
  // src + r * src_stride. Concat's forward, and with the roles swapped its backward.
  virtual void copy_rows(int64_t rows, int64_t cols, const float* src, int64_t src_stride,
                         float* dst, int64_t dst_stride);
  // kEltwiseMax. Eltwise max over several inputs, one at a time: for input index > 0, where
  // x > y, y = x and mask = index (index 0: y = x, mask = 0).
  virtual void eltwise_max_forward(int64_t n, int index, const float* x, float* y,
                                   int32_t* mask);
  // dx = mask == index ? dy : 0.
  virtual void eltwise_max_backward(int64_t n, int index, const float* dy, const int32_t* mask,
                                    float* dx);
  // The groups above in 16 bits, for layers that run in BF16 or FP16, where the backend
  // supports both the group and the format (supports_half); the defaults throw. Each reads
  // its 16-bit operands exactly and computes in FP32, as "16-bit storage" above says;
  // convolutions accumulate in FP32 (on CUDA on tensor cores where cuDNN finds that fastest,
  // whatever math() says).
  // As conv_forward with x, weight and y in `format`: the product is rounded to `format`,
  // then the bias (FP32) is added and the sum rounded again (cuDNN writes the product in
  // y's type, and the Native backend rounds as it does).
  virtual void conv_forward(Half format, const ConvGeometry& g, const uint16_t* x,
                            const uint16_t* weight, const float* bias, uint16_t* y);
  // As conv_backward_data with weight, dy and dx in `format`; dx rounded once.
  virtual void conv_backward_data(Half format, const ConvGeometry& g, const uint16_t* weight,
                                  const uint16_t* dy, uint16_t* dx);
  // As conv_backward_filter with x and dy in `format`: this call's weight gradient is
  // rounded to `format` once (cuDNN's filter gradient has the data's type), then added to
  // the FP32 dweight; dbias += the FP32 sum of dy per output channel (dbias may be null).
  virtual void conv_backward_filter(Half format, const ConvGeometry& g, const uint16_t* x,
                                    const uint16_t* dy, float* dweight, float* dbias);
  // As pool_forward and pool_backward with x, y, dy and dx in `format`: a maximum is exact,
  // an average and a gradient summed over windows are rounded once.
  virtual void pool_forward(Half format, PoolMethod method, const PoolGeometry& g,
                            const uint16_t* x, uint16_t* y, int32_t* mask);
  virtual void pool_backward(Half format, PoolMethod method, const PoolGeometry& g,
                             const uint16_t* dy, const int32_t* mask, uint16_t* dx);
  // As channel_affine with x and y in `format` (scale and bias FP32), y rounded once; and as
  // channel_reduce and scale_gradients with a, b, dy and x in `format`, out and the
  // gradients FP32.
  virtual void channel_affine(Half format, int64_t outer, int64_t channels, int64_t inner,
                              const uint16_t* x, const float* scale, const float* bias,
                              uint16_t* y);
  virtual void channel_reduce(Half format, int64_t outer, int64_t channels, int64_t inner,
                              const uint16_t* a, const uint16_t* b, float* out);
  virtual void scale_gradients(Half format, int64_t outer, int64_t channels, int64_t inner,
                               const uint16_t* dy, const uint16_t* x, float* dscale,
                               float* dbias);
  // As channel_moments, batch_norm_forward, batch_norm_inference and batch_norm_backward with
  // x, y, dy and dx in `format`: the statistics, inv_std and the backward pass's means stay
  // FP32 (from sums in double), and each 16-bit result is rounded once.
  virtual void channel_moments(Half format, int64_t outer, int64_t channels, int64_t inner,
                               const uint16_t* x, float* mean, float* var);
  virtual void batch_norm_forward(Half format, int64_t outer, int64_t channels, int64_t inner,
                                  float eps, const uint16_t* x, const float* mean,
                                  const float* var, uint16_t* y, float* inv_std,
                                  uint16_t* kept);
  virtual void batch_norm_inference(Half format, int64_t outer, int64_t channels,
                                    int64_t inner, float eps, const uint16_t* x,
                                    const float* mean_sum, const float* var_sum,
                                    const float* factor, uint16_t* y, float* mean,
                                    float* inv_std);
  virtual void batch_norm_backward(Half format, int64_t outer, int64_t channels, int64_t inner,
                                   const uint16_t* y, const uint16_t* dy, const float* inv_std,
                                   uint16_t* dx);
  // The three above with x, y, kept, dy and dx in `format`: kept, the Scale's output and g
  // are rounded to it before they are used, as the layers' 16-bit operations round them.
  virtual void batch_norm_scale_forward(Half format, int64_t outer, int64_t channels,
                                        int64_t inner, float eps, const uint16_t* x,
                                        const float* mean, const float* var,
                                        const float* scale, const float* bias, bool relu,
                                        uint16_t* y, float* inv_std, uint16_t* kept);
  virtual void batch_norm_scale_sums(Half format, int64_t outer, int64_t channels,
                                     int64_t inner, const uint16_t* kept, const uint16_t* dy,
                                     const float* scale, const float* bias, bool relu,
                                     float* means, float* dscale, float* dbias);
  virtual void batch_norm_scale_backward(Half format, int64_t outer, int64_t channels,
                                         int64_t inner, const uint16_t* kept,
                                         const uint16_t* dy, const float* inv_std,
                                         const float* scale, const float* bias, bool relu,
                                         const float* means, uint16_t* dx);
  // As copy_rows for 16-bit values of either format (their bits are copied).
  virtual void copy_rows(int64_t rows, int64_t cols, const uint16_t* src, int64_t src_stride,
                         uint16_t* dst, int64_t dst_stride);
  // As eltwise_max_forward and eltwise_max_backward with x, y, dy and dx in `format` (the
  // values compared as numbers; results exact).
  virtual void eltwise_max_forward(Half format, int64_t n, int index, const uint16_t* x,
                                   uint16_t* y, int32_t* mask);
  virtual void eltwise_max_backward(Half format, int64_t n, int index, const uint16_t* dy,
                                    const int32_t* mask, uint16_t* dx);

  // ---- the Caffe layer catalogue: optional groups (docs/prototxt.md) ----
  // kPointwise. y = f(x) (Pointwise above), in place allowed.
  virtual void pointwise_forward(const Pointwise& f, int64_t n, const float* x, float* y);
  // dx = dy * f'(x); y = f(x) (some functions read it); dx may be dy.
  virtual void pointwise_backward(const Pointwise& f, int64_t n, const float* x,
                                  const float* y, const float* dy, float* dx);
  // PReLU over x (outer, channels, inner): y = x > 0 ? x : slope[c] x. In place allowed.
  virtual void prelu_forward(int64_t outer, int64_t channels, int64_t inner, const float* x,
                             const float* slope, float* y);
  // Where dx is not null, dx = dy * (x > 0 ? 1 : slope[c]) (dx may be dy); where dslope is
  // not null, dslope[c] += the sum of dy x over x <= 0 (in a fixed order). Reads x before
  // writing dx.
  virtual void prelu_backward(int64_t outer, int64_t channels, int64_t inner, const float* x,
                              const float* dy, const float* slope, float* dx, float* dslope);

  // kTensorOps. y (outer, cols, rows) = each x (outer, rows, cols) transposed.
  virtual void transpose(int64_t outer, int64_t rows, int64_t cols, const float* x, float* y);
  // The box copy above; accumulate: dst += src.
  virtual void copy_block(const BlockCopy& box, const float* src, float* dst, bool accumulate);
  // y[o, i] = coeff * the sum over m of op(x[o, m, i]) for x (outer, mid, inner), summed in
  // double and rounded once: in order of m, or (a device with few outputs to share its
  // threads between) in a fixed order of its own, the same every run.
  virtual void reduce_middle(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                             float coeff, const float* x, float* y);
  // dx[o, m, i] = coeff * dy[o, i] * op'(x[o, m, i]) (1, sign(x) with sign(0) = 0, or 2 x);
  // kSum does not read x (may be null).
  virtual void reduce_middle_backward(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                                      float coeff, const float* x, const float* dy, float* dx);
  // The top_k largest of x along the middle axis of (outer, channels, inner), largest first
  // (equal values: the larger index first, as Caffe sorts): index[o, j, i] (as a float) and
  // value[o, j, i] for j < top_k; either output may be null.
  virtual void argmax(int64_t outer, int64_t channels, int64_t inner, int64_t top_k,
                      const float* x, float* index, float* value);
  // dst row r (cols values) = src row index[r], for r < rows; index holds row numbers as
  // floats (the integer part counts) in [0, src_rows). A number outside is never used as an
  // index: Native throws an Error naming it, CUDA writes NaN to the row.
  virtual void gather_rows(int64_t rows, int64_t cols, const float* index, int64_t src_rows,
                           const float* src, float* dst);
  // dst row index[r] += src row r for every r, in order of r (a fixed order on every
  // backend); rows whose index is outside [0, dst_rows) are skipped (Native throws).
  virtual void scatter_add_rows(int64_t rows, int64_t cols, const float* index,
                                int64_t dst_rows, const float* src, float* dst);

  // kLrn. x, y, scale (n, c, inner): scale and y as LrnArgs says.
  virtual void lrn_forward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args,
                           const float* x, float* scale, float* y);
  // dx = dy scale^-beta - 2 alpha beta / size * x * (the window sum over channels of
  // dy y / scale), with the forward's y and scale.
  virtual void lrn_backward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args,
                            const float* x, const float* y, const float* scale,
                            const float* dy, float* dx);

  // kIm2col. col (n, c kh kw, out_h, out_w) = each image's patches in Caffe's im2col order
  // (channel, kernel row, kernel column), zeros where the window covers padding; groups
  // ignored.
  virtual void im2col(const ConvGeometry& g, const float* x, float* col);
  // dx (written with =) = the sum of every col entry at the input position it was read from.
  virtual void col2im(const ConvGeometry& g, const float* col, float* dx);

  // kCaffeLosses. Every loss writes loss[0] (and norm[0] where it has one) in backend memory,
  // summed in a fixed order; every backward scales by dloss[0] (the loss's top diff).
  // Sigmoid cross-entropy of scores x and targets t (n values, `options.batch` rows): loss =
  // -sum [t ln(sigmoid(x)) + (1 - t) ln(1 - sigmoid(x))] / norm, computed stably, skipping
  // targets equal to the ignore label.
  virtual void sigmoid_cross_entropy_forward(int64_t n, const float* x, const float* target,
                                             const LossOptions& options, float* loss,
                                             float* norm);
  // dx = (sigmoid(x) - t) * dloss / norm; 0 where ignored.
  virtual void sigmoid_cross_entropy_backward(int64_t n, const float* x, const float* target,
                                              const LossOptions& options, const float* norm,
                                              const float* dloss, float* dx);
  // Hinge loss of scores x (rows, cols) with labels: margin[r, j] = max(0, 1 + d x[r, j]),
  // d = -1 at the label's column and +1 elsewhere; loss = sum of margin^p / rows, p = 1 or 2.
  virtual void hinge_loss_forward(int64_t rows, int64_t cols, int p, const float* x,
                                  const float* labels, float* margin, float* loss);
  // dx = d * (p == 1 ? sign(margin) : 2 margin) * dloss / rows.
  virtual void hinge_loss_backward(int64_t rows, int64_t cols, int p, const float* margin,
                                   const float* labels, const float* dloss, float* dx);
  // Contrastive loss of pairs a, b (rows, cols) with similar[r] (similar where its integer
  // part is nonzero, as Caffe reads it): diff = a - b, dist_sq[r] = |diff_r|^2; loss = sum
  // over rows of (similar ? dist_sq : legacy ? max(margin - dist_sq, 0) :
  // max(margin - sqrt(dist_sq), 0)^2) / (2 rows).
  virtual void contrastive_loss_forward(int64_t rows, int64_t cols, float margin, bool legacy,
                                        const float* a, const float* b, const float* similar,
                                        float* diff, float* dist_sq, float* loss);
  // The gradient for a (sign +1) or b (sign -1), Caffe's (dissimilar, not legacy: divided by
  // sqrt(dist_sq) + 1e-4).
  virtual void contrastive_loss_backward(int64_t rows, int64_t cols, float margin, bool legacy,
                                         float sign, const float* diff, const float* dist_sq,
                                         const float* similar, const float* dloss, float* dx);
  // Multinomial logistic loss of probabilities prob (rows, cols): loss = -sum over rows of
  // ln(max(prob[r, label], 1e-20)) / rows.
  virtual void multinomial_logistic_loss_forward(int64_t rows, int64_t cols, const float* prob,
                                                 const float* labels, float* loss);
  // dx[r, label] = -dloss / rows / max(prob[r, label], 1e-20), 0 elsewhere.
  virtual void multinomial_logistic_loss_backward(int64_t rows, int64_t cols,
                                                  const float* prob, const float* labels,
                                                  const float* dloss, float* dx);
  // Infogain loss of probabilities prob (rows, cols) with H (cols, cols): loss = -sum over
  // non-ignored rows of sum_j H[label, j] ln(max(prob[r, j], 1e-20)) / norm.
  virtual void infogain_loss_forward(int64_t rows, int64_t cols, const float* prob,
                                     const float* labels, const float* infogain,
                                     const LossOptions& options, float* loss, float* norm);
  // The gradient w.r.t. the scores whose softmax prob is: dx[r, j] = (prob[r, j] * sum_k
  // H[label, k] - H[label, j]) * dloss / norm; 0 on ignored rows.
  virtual void infogain_loss_backward(int64_t rows, int64_t cols, const float* prob,
                                      const float* labels, const float* infogain,
                                      const LossOptions& options, const float* norm,
                                      const float* dloss, float* dx);

  // Whether this backend implements a group of optional operations (default: none).
  virtual bool supports(Operation) const { return false; }

  // ---- solver ----
  // One fused pass over the parameter arena: regularisation, lr_mult/decay_mult per segment,
  // the rule's history update and the weight step. weights, grads, history and history2 are
  // the arena's arrays; the elements layout.first to layout.first + layout.n change (all of
  // them, or a gradient bucket's part). Each element finds its segment through the block
  // table (layout.block_segment[i / kArenaBlock]), so the pass costs the same however many
  // parameters there are. Elements outside every segment (padding) are left untouched.
  // step (backend memory) holds lr, grad_scale and Adam's bias correction c =
  // sqrt(1 - b2^t) / (1 - b1^t) for this update (advance_step wrote them). Per element, with
  // lr_i = lr * lr_mult, decay_i = weight_decay * decay_mult, reg(w) = w (L2) or sign(w)
  // (L1, sign(0) = 0), and g' = grad_scale * g + decay_i * reg(w):
  //   SGD:      h = momentum h + lr_i g';  w -= h                       (Caffe's form)
  //   Nesterov: h_old = h; h = momentum h + lr_i g';  w -= (1 + momentum) h - momentum h_old
  //   Adam:     m = history, v = history2, b1 = momentum, b2 = momentum2, t = step:
  //             m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
  //             w -= lr_i * c * m / (sqrt(v) + delta)
  //   AdamW:    as Adam but g' = grad_scale * g (no decay term), and the step is
  //             w -= lr_i * (c * m / (sqrt(v) + delta) + decay_i w)
  //   RMSProp:  h = momentum2 h + (1 - momentum2) g'^2;  w -= lr_i g' / (sqrt(h) + delta)
  //   AdaGrad:  h += g'^2;  w -= lr_i g' / (sqrt(h) + delta)
  //   AdaDelta: h = history (squared gradients), h2 = history2 (squared steps),
  //             m = momentum (Caffe's decay):  h = m h + (1 - m) g'^2;
  //             u = g' sqrt((h2 + delta) / (h + delta));  h2 = m h2 + (1 - m) u^2;
  //             w -= lr_i u                                         (Caffe's form)
  // history2 is used by Adam, AdamW and AdaDelta only (may be null otherwise). With
  // step->skip set (loss scaling found the gradients not finite) nothing changes.
  virtual void update(const UpdateArgs& args, const StepState* step, const UpdateLayout& layout,
                      float* weights, const float* grads, float* history,
                      float* history2) = 0;
  // advance_step_values (step_state.hpp) on *state, in backend memory: the iteration's loss
  // into the loss ring and running sum, the rate, bias correction and gradient scale of the
  // update for state->iter, then state->iter + 1. With schedule.clip > 0 it reads
  // state->grad_sumsq, which the caller has written (dot).
  virtual void advance_step(const StepSchedule& schedule, StepState* state) = 0;

  // ---- the side lane: parameter gradients beside the backward pass ----
  // A backward pass is a chain: each layer's input gradient waits for the one above it. Its
  // parameter gradients are branches nothing else in the pass reads, so they can run beside
  // the chain. Between open_side_lane() and close_side_lane() (Net::backward calls them; the
  // solver too, around a step's forward and backward passes; they nest), operations issued
  // between to_side_lane() and to_main_lane() (SideLane, below) run after every operation
  // issued before to_side_lane(), in order among themselves, and beside the operations
  // issued later on the main lane, which therefore must not write what they read nor touch
  // what they write. The outermost close_side_lane() makes everything issued after it wait
  // for the side lane; so do synchronize and copy_to_host. Outside open/close, to_side_lane
  // does nothing and operations run in the order issued. Any operation on backend memory may
  // run on the side lane; copies to or from the host and synchronize may not (the CUDA
  // backend throws: they belong to the main lane). The Native backend runs everything in
  // order (the calls do nothing).
  virtual bool has_side_lane() const { return false; }  // the calls below do something
  virtual void open_side_lane() {}
  virtual void close_side_lane() {}
  virtual void to_side_lane() {}
  virtual void to_main_lane() {}

  // ---- captured steps ----
  // Whether capture() works on this backend (CUDA: graphs). Where it does not, callers run
  // the operations themselves every time.
  virtual bool can_capture() const { return false; }
  // Calls ops with the backend recording the operations it launches instead of running them,
  // and returns the recording; nothing ops launched has run. Throws an Error saying why when
  // the operations cannot be recorded: an operation inside waits for the device, copies
  // from or to the host, or allocates (everything a step needs must exist before it is
  // captured, so run it once first). Host code in ops runs once, now.
  std::unique_ptr<CapturedOps> capture(const std::function<void()>& ops);

  // ---- algorithm choices ----
  // The algorithms this backend chose by timing them (CUDA: cuDNN's convolution algorithms
  // per geometry, and per product shape cuBLASLt's algorithm or Lamina's split-K kernel), as
  // text; empty where nothing is timed. Timing may choose differently in
  // another run, and different algorithms round differently, so a solver state keeps this
  // and a resumed run passes it to reuse_algorithm_choices: it then runs the same
  // algorithms and repeats the interrupted run bit for bit.
  virtual std::string algorithm_choices() const { return {}; }
  // Takes the algorithms named in `choices` (from algorithm_choices, possibly of another
  // process) for their shapes instead of timing them, including shapes chosen for already.
  // Choices made on another kind of device or with other library versions are ignored, with
  // a log line; so are lines this backend does not recognise.
  virtual void reuse_algorithm_choices(const std::string& choices) { (void)choices; }

 protected:
  virtual void begin_capture();
  // Ends the recording begun by begin_capture; keep false: discard it (ops threw) and
  // return null.
  virtual std::unique_ptr<CapturedOps> end_capture(bool keep);
  // Throws the Error of an optional operation this backend does not implement.
  [[noreturn]] void unsupported(Operation op, const char* function) const;
  // Throws the Error of a 16-bit operation this backend does not implement.
  [[noreturn]] void unsupported_half(const char* function) const;

 private:
  Math math_ = Math::kFP32;
};

// Backend::set_math for the scope's life; the math before it is restored when it goes.
class MathScope {
 public:
  MathScope(Backend& backend, Math math) : backend_(backend), before_(backend.math()) {
    backend.set_math(math);
  }
  ~MathScope() { backend_.set_math(before_); }
  MathScope(const MathScope&) = delete;
  MathScope& operator=(const MathScope&) = delete;

 private:
  Backend& backend_;
  Math before_;
};

// open_side_lane() for the scope's life: close() closes it (and may throw, like any
// operation); a scope left by an exception closes it in the destructor, which logs errors
// rather than throwing them, so the lane is never left open.
class SideLaneScope {
 public:
  explicit SideLaneScope(Backend& backend) : backend_(&backend) { backend.open_side_lane(); }
  ~SideLaneScope();  // backend.cpp
  void close() {
    Backend* backend = backend_;
    backend_ = nullptr;
    if (backend) backend->close_side_lane();
  }
  SideLaneScope(const SideLaneScope&) = delete;
  SideLaneScope& operator=(const SideLaneScope&) = delete;

 private:
  Backend* backend_;
};

// Operations issued while a SideLane lives go to the backend's side lane (when `beside` is
// true and a SideLaneScope is open: a backward pass, a solver's step); see
// Backend::to_side_lane.
class SideLane {
 public:
  SideLane(Backend& backend, bool beside) : backend_(beside ? &backend : nullptr) {
    if (backend_) backend_->to_side_lane();
  }
  ~SideLane() {
    if (backend_) backend_->to_main_lane();
  }
  SideLane(const SideLane&) = delete;
  SideLane& operator=(const SideLane&) = delete;

 private:
  Backend* backend_;
};

}  // namespace lamina
