// cuBLASLt matmuls with plans made once per shape and SM target (CudaContext::leave_sms):
// the fused Linear (linear.cu), the 16-bit products (half_gemm.cu) and TF32's
// (tf32_gemm.cu). A plan holds the descriptors and
// up to kCandidates algorithms from cuBLASLt's heuristic, all of which fit the shared cuBLAS
// workspace and reduce without atomics (so results are bit-identical run to run); with a
// 16-bit D they also exclude split sums kept in D's type, so D is rounded once from the FP32
// sum. The plan runs the candidate that took the least time on the call's own operands
// (with D on scratch memory), timed once when the plan is made: on an H200 the heuristic's
// first candidate for a BF16 4096 x 4096 x 1024 weight gradient took 83 us, its third 67.
// Different candidates may round differently, so the choices are kept in the solver state
// ("gemm ..." lines, lt_choices: the candidate's index and a fingerprint of the list it is
// in) and a resumed run takes them instead of timing again where its list is the same.
// An FP32 plan of a shape Lamina's split-K kernel takes (split_k_gemm.hpp) has that kernel
// as one more candidate after cuBLASLt's ("splitk" in the solver state). Candidates are timed
// as a CUDA graph of a few runs, as a training step replays them: timed one launch at a time,
// a product of a few microseconds measures its launch, not its kernels. Where there is no
// candidate at all the plan says so and the caller runs the product another way.
#include <cublasLt.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/device_timer.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/split_k_gemm.hpp"

namespace lamina::cuda_detail {

constexpr int kCandidates = 8;
// A remembered choice (reuse_lt_choice) of the split-K kernel, whatever the count of
// cuBLASLt's candidates before it, and its name in a solver state.
constexpr int kSplitK = -2;
constexpr char kSplitKName[] = "splitk";

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's order
  bool split_k = false;  // Lamina's kernel is the candidate after cuBLASLt's
  int split_k_sms = 0;   // the SMs the split-K kernel lays its blocks out for
  uint64_t list = 0;     // fingerprint of the candidates (list_of)
  int chosen = -1;       // into candidates, or their count for split_k; -1: not chosen yet
  int count() const { return static_cast<int>(candidates.size()) + (split_k ? 1 : 0); }
  // Whether candidate i is the split-K kernel.
  bool is_split_k(int i) const { return split_k && i == static_cast<int>(candidates.size()); }
  // The candidate a remembered choice names (an index of cuBLASLt's or kSplitK), -1 if none.
  int index_of(int remembered) const {
    if (remembered == kSplitK) return split_k ? static_cast<int>(candidates.size()) : -1;
    return remembered >= 0 && remembered < static_cast<int>(candidates.size()) ? remembered : -1;
  }
  ~LtPlan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

struct LtPlans {
  cublasLtHandle_t handle = nullptr;
  std::map<LtKey, std::unique_ptr<LtPlan>> by_key;
  // Choices from a solver state (reuse_lt_choice): a candidate's index in a list with that
  // fingerprint.
  std::map<LtKey, std::pair<int, uint64_t>> remembered;
};

LtPlans& CudaContext::lt_plans() {
  std::call_once(lt_plans_once_, [this] {
    auto plans = std::make_unique<LtPlans>();
    LAMINA_CUBLAS_CHECK(cublasLtCreate(&plans->handle));
    lt_plans_ = plans.release();
  });
  return *lt_plans_;
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

// A fingerprint of the candidates (FNV-1a over their opaque data, and whether the split-K
// kernel follows them): a solver state's index names the same algorithm only in a list with
// the same fingerprint (the same cuBLASLt, GPU and preferences).
uint64_t list_of(const LtPlan& plan) {
  uint64_t hash = 1469598103934665603ull;
  auto add = [&hash](uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (word >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  for (const cublasLtMatmulAlgo_t& algo : plan.candidates)
    for (uint64_t word : algo.data) add(word);
  // "splitk" and its layout's inputs: the same list gives the same bits.
  if (plan.split_k) {
    add(0x73706c69746bull);
    add(kSplitKLayout);
    add(static_cast<uint64_t>(plan.split_k_sms));
  }
  return hash;
}

// "FP32", "TF32", "BF16", "FP16": the arithmetic of a plan, for messages.
const char* arithmetic_name(const LtKey& key) {
  if (key.ab == CUDA_R_16BF) return "BF16";
  if (key.ab == CUDA_R_16F) return "FP16";
  return math_name(key.math);
}

std::unique_ptr<LtPlan> make_plan(cublasLtHandle_t handle, const LtKey& key, int sms) {
  auto plan = std::make_unique<LtPlan>();
  // Under leave_sms, the split-K kernel lays its blocks out for the SMs cuBLAS may use.
  plan->split_k_sms = key.sm_target > 0 ? key.sm_target : sms;
  plan->split_k = split_k_gemm_takes(key, plan->split_k_sms, CudaContext::kBlasWorkspaceBytes);
  const cublasComputeType_t compute =
      key.math == Math::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LAMINA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, lt_op(key.trans_a));
  set(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, lt_op(key.trans_b));
  set(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);  // a bias has D's type
  if (key.sm_target > 0)
    set(plan->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, static_cast<int32_t>(key.sm_target));
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
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->d,
                                            plan->d, preference, kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
    LAMINA_CUBLAS_CHECK(status);
    for (int i = 0; i < found; ++i) plan->candidates.push_back(results[i].algo);
  }
  plan->list = list_of(*plan);
  return plan;
}

// Runs candidate i of the plan on the lane's stream s with the lane's cuBLAS workspace.
void run(CudaContext& context, cublasLtHandle_t handle, const LtKey& key, const LtPlan& plan,
         int i, float alpha, const void* a, const void* b, const float* bias, float beta,
         void* d, cudaStream_t s) {
  if (plan.is_split_k(i)) {
    split_k_gemm(key, plan.split_k_sms, alpha, static_cast<const float*>(a),
                 static_cast<const float*>(b), bias, beta, static_cast<float*>(d),
                 context.blas_workspace(), context.split_k_counters(), s);
    return;
  }
  LAMINA_CUBLAS_CHECK(cublasLtMatmul(handle, plan.op, &alpha, a, plan.a, b, plan.b, &beta, d,
                                     plan.d, d, plan.d, &plan.candidates[i],
                                     context.blas_workspace(), CudaContext::kBlasWorkspaceBytes,
                                     s));
}

// The index of the candidate that runs the product fastest (a graph of a few runs, after one
// to warm up), D on zeroed scratch memory so the caller's D is untouched; a later candidate
// must be 2% faster to be chosen over an earlier one. Without the memory to time on: 0.
int fastest(CudaContext& context, cublasLtHandle_t handle, const LtKey& key, const LtPlan& plan,
            const void* a, const void* b, const float* bias, float beta, cudaStream_t s) {
  if (plan.count() == 1) return 0;
  const size_t d_bytes = static_cast<size_t>(key.m * key.n) * (key.d == CUDA_R_32F ? 4 : 2);
  ScratchMemory d(d_bytes);
  if (d.get() == nullptr) {
    LOG(WARNING) << "no device memory to time cuBLASLt's algorithms for a " << key.m << "x"
                 << key.k << " by " << key.k << "x" << key.n << " product; it takes the first";
    return 0;
  }
  LAMINA_CUDA_CHECK(cudaMemsetAsync(d.get(), 0, d_bytes, s));
  int best = 0;
  float best_ms = -1;
  for (int i = 0; i < plan.count(); ++i) {
    const float ms = graph_mean_ms(s, 5, [&] {
      run(context, handle, key, plan, i, 1.0f, a, b, bias, beta, d.get(), s);
      return true;
    });
    VLOG(2) << "Candidate " << i << " for " << key.m << "x" << key.k << " by "
            << key.k << "x" << key.n << ": " << ms * 1000 << " us";
    if (ms >= 0 && (best_ms < 0 || ms < 0.98f * best_ms)) {
      best = i;
      best_ms = ms;
    }
  }
  return best;
}

}  // namespace

bool CudaBackend::lt_matmul(const LtKey& product, float alpha, const void* a, const void* b,
                            const float* bias, float beta, void* d) {
  const cudaStream_t s = on_device();
  LtKey key = product;
  key.sm_target = context_.blas_sm_target();
  LtPlans& plans = context_.lt_plans();
  auto found = plans.by_key.find(key);
  if (found == plans.by_key.end()) {
    context_.require_not_capturing("choosing a cuBLASLt product's algorithm");
    found = plans.by_key
                .emplace(key, make_plan(plans.handle, key,
                                        context_.properties().multiProcessorCount))
                .first;
    LOG_IF(WARNING, found->second->count() == 0)
        << "cuBLASLt has no " << arithmetic_name(key) << " algorithm for a product of "
        << key.m << "x" << key.k << " by " << key.k << "x" << key.n << " (epilogue "
        << key.epilogue << ") on GPU " << context_.device() << "; it runs another way";
  }
  LtPlan& plan = *found->second;
  if (plan.count() == 0) return false;
  if (bias != nullptr && !plan.candidates.empty())
    set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (plan.chosen < 0) {
    context_.require_not_capturing("timing a cuBLASLt product's algorithms");
    const auto remembered = plans.remembered.find(key);
    if (remembered != plans.remembered.end()) {
      const auto [index, list] = remembered->second;
      if (list == plan.list && plan.index_of(index) >= 0) {
        plan.chosen = plan.index_of(index);
      } else {
        LOG(WARNING) << "The solver state's algorithm for a cuBLASLt product of " << key.m
                     << "x" << key.k << " by " << key.k << "x" << key.n << " is not among "
                     << "this cuBLASLt's candidates; timing them anew (the resumed run may "
                     << "differ from the interrupted one in the last bits)";
      }
    }
    if (plan.chosen < 0)
      plan.chosen = fastest(context_, plans.handle, key, plan, a, b, bias, beta, s);
  }
  run(context_, plans.handle, key, plan, plan.chosen, alpha, a, b, bias, beta, d, s);
  return true;
}

// "gemm <trans_a> <trans_b> <m> <n> <k> <epilogue> <align> <math> <ab> <d> <sm_target> =
// <candidate> <fingerprint of the candidates, hex>", the candidate cuBLASLt's index or
// "splitk"
std::string lt_choices(CudaContext& context) {
  std::ostringstream out;
  for (const auto& [key, plan] : context.lt_plans().by_key) {
    if (plan->chosen < 0) continue;
    out << "gemm " << key.trans_a << ' ' << key.trans_b << ' ' << key.m << ' ' << key.n << ' '
        << key.k << ' ' << key.epilogue << ' ' << key.align << ' '
        << static_cast<int>(key.math) << ' ' << key.ab << ' ' << key.d << ' ' << key.sm_target
        << " = ";
    if (plan->is_split_k(plan->chosen)) {
      out << kSplitKName;
    } else {
      out << plan->chosen;
    }
    out << ' ' << std::hex << plan->list << std::dec << '\n';
  }
  return out.str();
}

bool reuse_lt_choice(CudaContext& context, const std::string& line) {
  std::istringstream in(line);
  std::string word, equals, candidate;
  LtKey key;
  int epilogue = 0, math = 0, ab = 0, d = 0;
  uint64_t list = 0;
  in >> word >> key.trans_a >> key.trans_b >> key.m >> key.n >> key.k >> epilogue >> key.align >>
      math >> ab >> d >> key.sm_target >> equals >> candidate >> std::hex >> list;
  if (!in || word != "gemm" || equals != "=" || math < 0 || math > 1 || !(in >> std::ws).eof())
    return false;
  int chosen = kSplitK;
  if (candidate != kSplitKName) {
    std::istringstream number(candidate);
    if (!(number >> chosen) || !(number >> std::ws).eof() || chosen < 0) return false;
  }
  key.epilogue = static_cast<cublasLtEpilogue_t>(epilogue);
  key.math = static_cast<Math>(math);
  key.ab = static_cast<cudaDataType_t>(ab);
  key.d = static_cast<cudaDataType_t>(d);
  LtPlans& plans = context.lt_plans();
  plans.remembered[key] = {chosen, list};
  // A plan made already runs the remembered candidate from its next call, or is timed again
  // at its next call when the candidate is not its to run.
  const auto made = plans.by_key.find(key);
  if (made != plans.by_key.end() && made->second->count() > 0) {
    LtPlan& plan = *made->second;
    plan.chosen = list == plan.list ? plan.index_of(chosen) : -1;
  }
  return true;
}

}  // namespace lamina::cuda_detail
