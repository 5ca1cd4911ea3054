// Convolution by im2col + cuBLAS: the CUDA backend's convolution in builds without cuDNN,
// and for geometries cuDNN cannot take (sizes past its 32-bit dimensions, or no supported
// algorithm). cudnn.cpp decides which path a geometry takes.
//
// The same scheme as the Native backend (and Caffe): per image, the column matrix
// col (c kh kw, out_h out_w) holds in row (ci, ki, kj) the input pixel each output position
// sees through kernel tap (ki, kj), 0 in the padding. With cg = c / groups, kg = k / groups
// and group_rows = cg kh kw, per group g
//   y_g (kg, out)            = W_g (kg, group_rows) col_g (group_rows, out)
//   dcol_g (group_rows, out) = W_g^T dy_g;  dx = col2im(dcol)
//   dW_g (kg, group_rows)   += dy_g col_g^T
// The groups of one image are one strided-batched sgemm. im2col and col2im are
// im2col_kernels.cu's (col2im gathers: one thread per input element sums the taps that read
// it, in the Native backend's order, no atomics).
// The column matrix lives in the context's workspace. In 16 bits (where cuDNN cannot) the
// operands are widened to floats after it in the workspace, the float path runs, and the
// results are rounded: the filter gradient of one call before it is added, as cuDNN's is.
#include <array>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/im2col.hpp"

namespace lamina::cuda_detail {
namespace {

cublasOperation_t blas_op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Row-major C_i (m, n) = alpha op(A_i) op(B_i) + beta C_i for i < batch, the matrices of
// each operand strided in memory (cuBLAS is column-major: C^T = op(B)^T op(A)^T), in math.
void strided_gemm(cublasHandle_t handle, Math math, bool trans_a, bool trans_b, int64_t m,
                  int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                  float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (math == Math::kFP32) {
    LAMINA_CUBLAS_CHECK(cublasSgemmStridedBatched_64(handle, blas_op(trans_b), blas_op(trans_a),
                                                     n, m, k, &alpha, b, ldb, stride_b, a, lda,
                                                     stride_a, &beta, c, ldc, stride_c, batch));
    return;
  }
  LAMINA_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, blas_op(trans_b), blas_op(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b,
      a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch,
      CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
}

// Sizes derived from a geometry.
struct Im2colDims {
  int64_t kg, group_rows, in_image, out_plane, out_image, col_floats;
  bool pointwise;  // 1x1, stride 1, no padding: an image is its own column matrix
};

Im2colDims im2col_dims(const ConvGeometry& g) {
  Im2colDims d;
  d.kg = g.k / g.groups;
  d.group_rows = g.c / g.groups * g.kh * g.kw;
  d.in_image = g.c * g.h * g.w;
  d.out_plane = g.out_h * g.out_w;
  d.out_image = g.k * d.out_plane;
  d.col_floats = g.c * g.kh * g.kw * d.out_plane;
  d.pointwise = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
                g.pad_w == 0 && g.out_h == g.h && g.out_w == g.w;
  return d;
}

}  // namespace

void CudaBackend::im2col_conv_forward(const ConvGeometry& g, const float* x,
                                      const float* weight, float* y) {
  const cudaStream_t s = on_device();
  const Im2colDims d = im2col_dims(g);
  for (int64_t i = 0; i < g.n; ++i) {
    const float* col = x + i * d.in_image;
    if (!d.pointwise) {
      float* scratch = static_cast<float*>(context_.workspace(sizeof(float) * d.col_floats));
      launch_im2col(s, g, g.c, x + i * d.in_image, scratch);
      col = scratch;
    }
    strided_gemm(context_.blas(), math(), false, false, d.kg, d.out_plane, d.group_rows, 1.0f,
                 weight, d.group_rows, d.kg * d.group_rows, col, d.out_plane,
                 d.group_rows * d.out_plane, 0.0f, y + i * d.out_image, d.out_plane,
                 d.kg * d.out_plane, g.groups);
  }
}

void CudaBackend::im2col_conv_backward_data(const ConvGeometry& g, const float* weight,
                                            const float* dy, float* dx) {
  const cudaStream_t s = on_device();
  const Im2colDims d = im2col_dims(g);
  for (int64_t i = 0; i < g.n; ++i) {
    float* dcol = d.pointwise
                      ? dx + i * d.in_image
                      : static_cast<float*>(context_.workspace(sizeof(float) * d.col_floats));
    strided_gemm(context_.blas(), math(), true, false, d.group_rows, d.out_plane, d.kg, 1.0f,
                 weight, d.group_rows, d.kg * d.group_rows, dy + i * d.out_image, d.out_plane,
                 d.kg * d.out_plane, 0.0f, dcol, d.out_plane, d.group_rows * d.out_plane,
                 g.groups);
    if (d.pointwise) continue;
    launch_col2im(s, g, g.c, dcol, dx + i * d.in_image);
  }
}

void CudaBackend::im2col_conv_backward_filter(const ConvGeometry& g, const float* x,
                                              const float* dy, float* dweight) {
  const cudaStream_t s = on_device();
  const Im2colDims d = im2col_dims(g);
  for (int64_t i = 0; i < g.n; ++i) {
    const float* col = x + i * d.in_image;
    if (!d.pointwise) {
      float* scratch = static_cast<float*>(context_.workspace(sizeof(float) * d.col_floats));
      launch_im2col(s, g, g.c, x + i * d.in_image, scratch);
      col = scratch;
    }
    strided_gemm(context_.blas(), math(), false, true, d.kg, d.group_rows, d.out_plane, 1.0f,
                 dy + i * d.out_image, d.out_plane, d.kg * d.out_plane, col, d.out_plane,
                 d.group_rows * d.out_plane, 1.0f, dweight, d.group_rows,
                 d.kg * d.group_rows, g.groups);
  }
}

// ---- 16-bit convolutions where cuDNN cannot: widened to floats, the float im2col above ----

namespace {

// The context's workspace laid out for a widened convolution: the float im2col's column
// matrix first (it asks the workspace for that much and gets its start), then float copies
// of the operands and the results, `counts` floats each at 256-byte boundaries.
template <size_t N>
std::array<float*, N> widened_arrays(CudaContext& context, const ConvGeometry& g,
                                     const std::array<int64_t, N>& counts) {
  std::array<size_t, N + 1> bytes;
  bytes[0] = sizeof(float) * im2col_dims(g).col_floats;
  for (size_t i = 0; i < N; ++i) bytes[i + 1] = sizeof(float) * counts[i];
  const std::array<char*, N + 1> pieces = context.workspace_pieces(bytes);
  std::array<float*, N> arrays;
  for (size_t i = 0; i < N; ++i) arrays[i] = reinterpret_cast<float*>(pieces[i + 1]);
  return arrays;
}

}  // namespace

void CudaBackend::im2col_conv_forward(Half format, const ConvGeometry& g, const uint16_t* x,
                                      const uint16_t* weight, uint16_t* y) {
  const auto [wx, ww, wy] = widened_arrays<3>(
      context_, g, {g.input_count(), g.weight_count(), g.output_count()});
  from_half(format, g.input_count(), x, wx);
  from_half(format, g.weight_count(), weight, ww);
  im2col_conv_forward(g, wx, ww, wy);
  to_half(format, g.output_count(), wy, y);
}

void CudaBackend::im2col_conv_backward_data(Half format, const ConvGeometry& g,
                                            const uint16_t* weight, const uint16_t* dy,
                                            uint16_t* dx) {
  const auto [ww, wdy, wdx] = widened_arrays<3>(
      context_, g, {g.weight_count(), g.output_count(), g.input_count()});
  from_half(format, g.weight_count(), weight, ww);
  from_half(format, g.output_count(), dy, wdy);
  im2col_conv_backward_data(g, ww, wdy, wdx);
  to_half(format, g.input_count(), wdx, dx);
}

// As cuDNN's 16-bit filter gradient: this call's gradient rounded to format, then added.
void CudaBackend::im2col_conv_backward_filter(Half format, const ConvGeometry& g,
                                              const uint16_t* x, const uint16_t* dy,
                                              float* dweight) {
  const int64_t weights = g.weight_count();
  const auto [wx, wdy, wdw, half_dw] = widened_arrays<4>(
      context_, g, {g.input_count(), g.output_count(), weights, (weights + 1) / 2});
  from_half(format, g.input_count(), x, wx);
  from_half(format, g.output_count(), dy, wdy);
  zero(sizeof(float) * weights, wdw);
  im2col_conv_backward_filter(g, wx, wdy, wdw);
  auto* rounded = reinterpret_cast<uint16_t*>(half_dw);
  to_half(format, weights, wdw, rounded);
  add_half(format, weights, rounded, dweight);
}

}  // namespace lamina::cuda_detail
