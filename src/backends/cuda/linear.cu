// The fused Linear operations on CUDA. linear_forward is one cuBLASLt matmul, in the backend's
// math() (FP32, or TF32 on tensor cores), whose epilogue adds the bias and applies the ReLU;
// its plan (descriptors, and the algorithm cuBLASLt's heuristic ranks first among those that
// fit the shared cuBLAS workspace and reduce without atomics, so results are bit-identical
// run to run) is made once per shape, pointer alignment and math and kept in the context;
// where cuBLASLt offers none, the product runs as a gemm with the bias and the ReLU apart.
// linear_bias_backward is one kernel: the ReLU's derivative and the bias gradient's column
// sums, in a fixed order.
#include <cublasLt.h>
#include <glog/logging.h>

#include <map>
#include <memory>
#include <tuple>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/common.hpp"
#include "lamina/relu.hpp"

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
  // (rows, n, k, bias, relu, alignment in bytes of every pointer, math)
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, Math>;
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

// Row-major y (rows, n) = x (rows, k) W (n, k)^T is, column-major, y^T (n, rows) =
// op_T(W as k x n) * (x as k x rows).
std::unique_ptr<LinearPlan> make_plan(CudaContext& context, cublasLtHandle_t handle,
                                      const LinearPlans::Key& key) {
  const auto [rows, n, k, bias, relu, align, math] = key;
  auto plan = std::make_unique<LinearPlan>();
  const cublasComputeType_t compute =
      math == Math::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cublasLtEpilogue_t epilogue =
      relu ? (bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
           : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  set(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->w, CUDA_R_32F, k, n, k));
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->x, CUDA_R_32F, k, rows, k));
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->y, CUDA_R_32F, n, rows, n));

  cublasLtMatmulPreference_t preference = nullptr;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = CudaContext::kBlasWorkspaceBytes;
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
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
    LOG(WARNING) << "cuBLASLt has no " << math_name(math) << " algorithm for a Linear product of "
                 << rows << "x" << k
                 << " by " << k << "x" << n << (relu ? " with ReLU" : "") << " on GPU "
                 << context.device() << "; it runs as a gemm with the bias and ReLU apart";
    plan->unfused = true;
    return plan;
  }
  LAMINA_CUBLAS_CHECK(status);
  plan->algo = result.algo;
  return plan;
}

// dz = y > 0 ? dy : 0 (y null: dz is dy), db[c] += sum over rows of dz[., c]. A block
// covers 32 columns; its 8 rows of threads stride over the rows, then row 0 adds the 8
// partial sums in order: the same bits every run.
constexpr int kColumns = 32, kRowThreads = 8;

__global__ void linear_bias_backward_kernel(int64_t rows, int64_t n, const float* y,
                                            const float* dy, float* dz, float* db) {
  __shared__ float partial[kRowThreads][kColumns];
  const int64_t c = int64_t{blockIdx.x} * kColumns + threadIdx.x;
  float sum = 0;
  if (c < n) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowThreads) {
      float v = dy[r * n + c];
      if (y != nullptr) {
        v = relu_backward_value(y[r * n + c], v, 0.0f);
        dz[r * n + c] = v;
      }
      sum += v;
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= n || db == nullptr) return;
  float total = 0;
  for (int i = 0; i < kRowThreads; ++i) total += partial[i][threadIdx.x];
  db[c] += total;
}

}  // namespace

void CudaBackend::linear_forward(int64_t rows, int64_t n, int64_t k, const float* x,
                                 const float* w, const float* bias, bool relu, float* y) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0) return;
  // The product, then the bias and the ReLU apart: for an empty product (k = 0: y =
  // act(bias)) and shapes cuBLASLt has no algorithm for.
  auto unfused = [&] {
    gemm(Transpose::kNo, Transpose::kYes, rows, n, k, 1.0f, x, w, 0.0f, y);
    if (bias != nullptr) channel_affine(rows, n, 1, y, nullptr, bias, y);
    if (relu) activation_forward(Activation::kReLU, rows * n, 0.0f, y, y);
  };
  if (k == 0) return unfused();
  LinearPlans& plans = context_.linear_plans();
  const LinearPlans::Key key{rows, n, k, bias != nullptr, relu, alignment_of({x, w, bias, y}),
                             math()};
  auto found = plans.by_shape.find(key);
  if (found == plans.by_shape.end()) {
    context_.require_not_capturing("choosing a Linear product's algorithm");
    found = plans.by_shape.emplace(key, make_plan(context_, plans.handle, key)).first;
  }
  LinearPlan& plan = *found->second;
  if (plan.unfused) return unfused();
  if (bias != nullptr) set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = 0.0f;
  LAMINA_CUBLAS_CHECK(cublasLtMatmul(plans.handle, plan.op, &alpha, w, plan.w, x, plan.x, &beta,
                                     y, plan.y, y, plan.y, &plan.algo, context_.blas_workspace(),
                                     CudaContext::kBlasWorkspaceBytes, s));
}

void CudaBackend::linear_bias_backward(int64_t rows, int64_t n, const float* y, const float* dy,
                                       float* dz, float* db) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0 || (y == nullptr && db == nullptr)) return;
  const dim3 block(kColumns, kRowThreads);
  const unsigned grid = static_cast<unsigned>((n + kColumns - 1) / kColumns);
  linear_bias_backward_kernel<<<grid, block, 0, s>>>(rows, n, y, dy, dz, db);
  LAMINA_CUDA_LAUNCHED(linear_bias_backward_kernel);
}

}  // namespace lamina::cuda_detail
