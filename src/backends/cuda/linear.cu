// The fused Linear forward on CUDA: one cuBLASLt matmul whose epilogue adds the bias and
// applies the ReLU, with x, W and y in FP32 (the product in the backend's math(): FP32, or
// TF32 on tensor cores) or in 16 bits (BF16, FP16: the product accumulated in FP32 on tensor
// cores, y rounded once). Its plan (descriptors, and the algorithm cuBLASLt's heuristic
// ranks first among those that fit the shared cuBLAS workspace and reduce without atomics,
// so results are bit-identical run to run) is made once per shape, pointer alignment, math
// and storage type and kept in the context; where cuBLASLt offers none, the product runs as
// a gemm with the bias and the ReLU apart.
//
// A 16-bit y with a bias is never fused: cuBLASLt's bias has y's type (cublasLt.h,
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: FP32 only for integer and FP8 products; an FP32 bias
// with a BF16 or FP16 y is CUBLAS_STATUS_INVALID_VALUE, seen with cuBLAS 13.1), and a bias
// rounded to 16 bits first would round y twice. Such a product runs in FP32 into the
// workspace, and one kernel adds the FP32 bias, applies the ReLU and rounds y once.
// The backward's kernel is in linear_bias_backward.cu.
#include <cublasLt.h>
#include <glog/logging.h>

#include <map>
#include <memory>
#include <tuple>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {

struct LinearPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool unfused = false;  // cuBLASLt offers no algorithm: gemm, then bias and ReLU apart
  ~LinearPlan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (cublasLtMatrixLayout_t l : {w, x, y})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

struct LinearPlans {
  cublasLtHandle_t handle = nullptr;
  // (rows, n, k, bias, relu, alignment in bytes of every pointer, math (kFP32 for 16-bit
  // storage), the storage type of x, W and y)
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, Math, cudaDataType_t>;
  std::map<Key, std::unique_ptr<LinearPlan>> by_shape;
};

LinearPlans& CudaContext::linear_plans() {
  std::call_once(linear_plans_once_, [this] {
    auto plans = std::make_unique<LinearPlans>();
    LAMINA_CUBLAS_CHECK(cublasLtCreate(&plans->handle));
    linear_plans_ = plans.release();
  });
  return *linear_plans_;
}

namespace {

// The largest power of two, at most 256, that divides every address.
int alignment_of(std::initializer_list<const void*> pointers) {
  int align = 256;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    while (reinterpret_cast<uintptr_t>(p) % align != 0) align /= 2;
  }
  return align;
}

template <class T>
void set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  LAMINA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
}

// "FP32", "TF32", "BF16", "FP16": the arithmetic of a plan, for messages.
const char* arithmetic_name(Math math, cudaDataType_t storage) {
  if (storage == CUDA_R_16BF) return "BF16";
  if (storage == CUDA_R_16F) return "FP16";
  return math_name(math);
}

// Row-major y (rows, n) = x (rows, k) W (n, k)^T is, column-major, y^T (n, rows) =
// op_T(W as k x n) * (x as k x rows).
std::unique_ptr<LinearPlan> make_plan(CudaContext& context, cublasLtHandle_t handle,
                                      const LinearPlans::Key& key) {
  const auto [rows, n, k, bias, relu, align, math, storage] = key;
  auto plan = std::make_unique<LinearPlan>();
  const cublasComputeType_t compute =
      math == Math::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cublasLtEpilogue_t epilogue =
      relu ? (bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
           : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  set(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);  // the bias of y's type
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w, storage, k, n, k));
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->x, storage, k, rows, k));
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->y, storage, n, rows, n));

  cublasLtMatmulPreference_t preference = nullptr;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = CudaContext::kBlasWorkspaceBytes;
  // No atomics (INPLACE); a 16-bit y also excludes split sums kept in y's type
  // (OUTPUT_TYPE), which would round y more than once.
  uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
  if (storage != CUDA_R_32F) reductions &= ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const uint32_t alignment = static_cast<uint32_t>(align);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof(reductions));
  for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment,
                                                    sizeof(alignment));
  }
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->w, plan->x, plan->y,
                                            plan->y, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    LOG(WARNING) << "cuBLASLt has no " << arithmetic_name(math, storage)
                 << " algorithm for a Linear product of " << rows << "x" << k << " by " << k
                 << "x" << n << (bias ? " with bias" : "") << (relu ? " with ReLU" : "")
                 << " on GPU " << context.device()
                 << "; it runs as a gemm with the bias and ReLU apart";
    plan->unfused = true;
    return plan;
  }
  LAMINA_CUBLAS_CHECK(status);
  plan->algo = result.algo;
  return plan;
}

// y (rows, n) = act(product + bias), rounded once when y is 16-bit, i over the rows * n
// values of the FP32 product (which may be y itself, in FP32); bias (n) may be null. The ReLU
// gives what the Native backend's does: +0 for a negative value, NaN for NaN and -inf.
template <class S>
__global__ void bias_relu_kernel(int64_t count, int64_t n, const float* product,
                                 const float* bias, bool relu, typename S::Stored* y) {
  LAMINA_GRID_STRIDE_LOOP(i, count) {
    float v = product[i];
    if (bias != nullptr) v += bias[i % n];
    if (relu && !(v > 0)) v = (v != v || v == -INFINITY) ? NAN : 0.0f;
    y[i] = S::store(v);
  }
}

}  // namespace

bool CudaBackend::fused_linear(cudaDataType_t storage, int64_t rows, int64_t n, int64_t k,
                               const void* x, const void* w, const float* bias, bool relu,
                               void* y) {
  const cudaStream_t s = on_device();
  if (bias != nullptr && storage != CUDA_R_32F) return false;  // see the top of this file
  LinearPlans& plans = context_.linear_plans();
  const Math plan_math = storage == CUDA_R_32F ? math() : Math::kFP32;
  const LinearPlans::Key key{rows, n, k, bias != nullptr, relu, alignment_of({x, w, bias, y}),
                             plan_math, storage};
  auto found = plans.by_shape.find(key);
  if (found == plans.by_shape.end()) {
    context_.require_not_capturing("choosing a Linear product's algorithm");
    found = plans.by_shape.emplace(key, make_plan(context_, plans.handle, key)).first;
  }
  LinearPlan& plan = *found->second;
  if (plan.unfused) return false;
  if (bias != nullptr) set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = 0.0f;
  LAMINA_CUBLAS_CHECK(cublasLtMatmul(plans.handle, plan.op, &alpha, w, plan.w, x, plan.x, &beta,
                                     y, plan.y, y, plan.y, &plan.algo, context_.blas_workspace(),
                                     CudaContext::kBlasWorkspaceBytes, s));
  return true;
}

void CudaBackend::linear_forward(int64_t rows, int64_t n, int64_t k, const float* x,
                                 const float* w, const float* bias, bool relu, float* y) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0) return;
  if (k > 0 && fused_linear(CUDA_R_32F, rows, n, k, x, w, bias, relu, y)) return;
  // The product, then the bias and the ReLU in one pass over y: for an empty product (k = 0:
  // y = act(bias)) and shapes cuBLASLt has no algorithm for.
  gemm(Transpose::kNo, Transpose::kYes, rows, n, k, 1.0f, x, w, 0.0f, y);
  if (bias == nullptr && !relu) return;
  const int64_t count = rows * n;
  bias_relu_kernel<Fp32Storage><<<elementwise_grid(count), kBlock, 0, s>>>(count, n, y, bias,
                                                                          relu, y);
  LAMINA_CUDA_LAUNCHED(bias_relu_kernel);
}

void CudaBackend::linear_forward(Half format, int64_t rows, int64_t n, int64_t k,
                                 const uint16_t* x, const uint16_t* w, const float* bias,
                                 bool relu, uint16_t* y) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0) return;
  if (k > 0 && fused_linear(half_data_type(format), rows, n, k, x, w, bias, relu, y)) return;
  // Unfused (a bias, k = 0, or no cuBLASLt algorithm), still with y rounded once: the
  // product in FP32 in the workspace, then the bias, the ReLU and the rounding in one pass.
  const int64_t count = rows * n;
  float* product = static_cast<float*>(context_.workspace(sizeof(float) * count));
  gemm(format, Transpose::kNo, Transpose::kYes, rows, n, k, 1.0f, x, w, 0.0f, product);
  with_half_storage(format, [&](auto storage) {
    bias_relu_kernel<decltype(storage)>
        <<<elementwise_grid(count), kBlock, 0, s>>>(count, n, product, bias, relu, y);
  });
  LAMINA_CUDA_LAUNCHED(bias_relu_kernel);
}

}  // namespace lamina::cuda_detail
