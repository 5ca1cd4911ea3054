// cuBLASLt matmuls with plans made once per shape: the fused Linear (linear.cu) and the
// products with a 16-bit result (half_gemm.cu). A plan holds the descriptors and the
// algorithm cuBLASLt's heuristic ranks first among those that fit the shared cuBLAS
// workspace and reduce without atomics (so results are bit-identical run to run); with a
// 16-bit D it also excludes split sums kept in D's type, so D is rounded once from the FP32
// sum. Plans are kept in the context by LtKey; where cuBLASLt offers no algorithm the plan
// says so and the caller runs the product another way.
#include <cublasLt.h>
#include <glog/logging.h>

#include <map>
#include <memory>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/lt_matmul.hpp"

namespace lamina::cuda_detail {

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool available = false;  // cuBLASLt offered an algorithm
  ~LtPlan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

struct LtPlans {
  cublasLtHandle_t handle = nullptr;
  std::map<LtKey, std::unique_ptr<LtPlan>> by_key;
};

LtPlans& CudaContext::lt_plans() {
  std::call_once(lt_plans_once_, [this] {
    auto plans = std::make_unique<LtPlans>();
    LAMINA_CUBLAS_CHECK(cublasLtCreate(&plans->handle));
    lt_plans_ = plans.release();
  });
  return *lt_plans_;
}

int alignment_of(std::initializer_list<const void*> pointers) {
  int align = 256;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    while (reinterpret_cast<uintptr_t>(p) % align != 0) align /= 2;
  }
  return align;
}

namespace {

template <class T>
void set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  LAMINA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
}

template <class T>
cublasStatus_t prefer(cublasLtMatmulPreference_t preference,
                      cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  return cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
}

cublasOperation_t lt_op(bool transposed) { return transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

// "FP32", "TF32", "BF16", "FP16": the arithmetic of a plan, for messages.
const char* arithmetic_name(const LtKey& key) {
  if (key.ab == CUDA_R_16BF) return "BF16";
  if (key.ab == CUDA_R_16F) return "FP16";
  return math_name(key.math);
}

std::unique_ptr<LtPlan> make_plan(cublasLtHandle_t handle, const LtKey& key) {
  auto plan = std::make_unique<LtPlan>();
  const cublasComputeType_t compute =
      key.math == Math::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, lt_op(key.trans_a));
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, lt_op(key.trans_b));
  set(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);  // a bias has D's type
  // Column-major, as stored: A is m x k (k x m transposed), B k x n (n x k), D m x n.
  const auto [a_rows, a_cols] = key.trans_a ? std::pair{key.k, key.m} : std::pair{key.m, key.k};
  const auto [b_rows, b_cols] = key.trans_b ? std::pair{key.n, key.k} : std::pair{key.k, key.n};
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, key.ab, a_rows, a_cols, a_rows));
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, key.ab, b_rows, b_cols, b_rows));
  LAMINA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, key.d, key.m, key.n, key.m));

  cublasLtMatmulPreference_t preference = nullptr;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = CudaContext::kBlasWorkspaceBytes;
  // No atomics (INPLACE); a 16-bit D also excludes split sums kept in D's type
  // (OUTPUT_TYPE), which would round D more than once.
  uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
  if (key.d != CUDA_R_32F) reductions &= ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const uint32_t alignment = static_cast<uint32_t>(key.align);
  cublasStatus_t status = prefer(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = prefer(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (status == CUBLAS_STATUS_SUCCESS) status = prefer(preference, attribute, alignment);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->d,
                                            plan->d, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0))
    return plan;  // not available
  LAMINA_CUBLAS_CHECK(status);
  plan->algo = result.algo;
  plan->available = true;
  return plan;
}

}  // namespace

bool CudaBackend::lt_matmul(const LtKey& key, const void* a, const void* b, const float* bias,
                            void* d) {
  const cudaStream_t s = on_device();
  LtPlans& plans = context_.lt_plans();
  auto found = plans.by_key.find(key);
  if (found == plans.by_key.end()) {
    context_.require_not_capturing("choosing a cuBLASLt product's algorithm");
    found = plans.by_key.emplace(key, make_plan(plans.handle, key)).first;
    LOG_IF(WARNING, !found->second->available)
        << "cuBLASLt has no " << arithmetic_name(key) << " algorithm for a product of "
        << key.m << "x" << key.k << " by " << key.k << "x" << key.n << " (epilogue "
        << key.epilogue << ") on GPU " << context_.device() << "; it runs another way";
  }
  LtPlan& plan = *found->second;
  if (!plan.available) return false;
  if (bias != nullptr) set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float alpha = 1.0f, beta = 0.0f;
  LAMINA_CUBLAS_CHECK(cublasLtMatmul(plans.handle, plan.op, &alpha, a, plan.a, b, plan.b, &beta,
                                     d, plan.d, d, plan.d, &plan.algo,
                                     context_.blas_workspace(),
                                     CudaContext::kBlasWorkspaceBytes, s));
  return true;
}

}  // namespace lamina::cuda_detail
