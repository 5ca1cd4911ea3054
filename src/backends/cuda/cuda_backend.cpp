// CudaBackend's memory, transfers and cuBLAS operations; make_cuda_backend, the device count
// and device_query. The kernels are in the .cu files next to this one.
//
// cuBLAS is column-major and Lamina row-major: a row-major (m, n) matrix is the column-major
// (n, m) matrix of its transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T,
// with A and B swapped and the same transpose flags (Caffe's trick). The 64-bit cuBLAS entry
// points take Lamina's int64 sizes as they are.
#include <glog/logging.h>

#include <sstream>
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"

namespace lamina {
namespace cuda_detail {

// ---------------------------------------------------------------------------------------
// Memory and transfers
// ---------------------------------------------------------------------------------------

// TF32 tensor cores came with compute capability 8.0 (Ampere); before, cuBLAS's FAST_TF32
// would quietly compute in FP32, so TF32 layers are refused there.
bool CudaBackend::supports_math(Math math) const {
  return math == Math::kFP32 || context_.properties().major >= 8;
}

void* CudaBackend::allocate(size_t bytes) {
  context_.make_current();
  return context_.allocate(bytes, "a tensor or buffer");
}

void CudaBackend::deallocate(void* p) noexcept {
  if (p == nullptr) return;
  // Kernels queued on either lane may still use p; cudaFree waits for the device anyway,
  // and frees happen only when tensors grow or the net is destroyed.
  int current = -1;
  cudaError_t status = cudaGetDevice(&current);
  if (status == cudaSuccess && current != context_.device()) {
    status = cudaSetDevice(context_.device());
  }
  if (status == cudaSuccess) status = cudaStreamSynchronize(context_.stream());
  if (status == cudaSuccess) status = cudaStreamSynchronize(context_.side_stream());
  if (status == cudaSuccess) status = cudaStreamSynchronize(context_.collective_stream());
  if (status == cudaSuccess) status = cudaFree(p);
  if (status != cudaSuccess) {
    cudaGetLastError();
    // At process exit the runtime may be gone before the last buffers: nothing to report.
    if (status != cudaErrorCudartUnloading) {
      LOG(ERROR) << "CudaBackend::deallocate: freeing device memory on " << name()
                 << " failed with " << cudaGetErrorName(status) << " ("
                 << cudaGetErrorString(status) << ")";
    }
  }
}

void CudaBackend::copy(size_t bytes, const void* src, void* dst) {
  const cudaStream_t s = on_device();
  if (bytes == 0 || src == dst) return;
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

void CudaBackend::copy_to_host(size_t bytes, const void* src, void* host_dst) {
  context_.require_main_lane("a copy to the host");
  const cudaStream_t s = on_device();
  context_.require_not_capturing("a copy to the host");
  context_.join_side_lane();
  context_.join_collective_lane();
  if (bytes == 0) return;
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::copy_from_host(size_t bytes, const void* host_src, void* dst) {
  context_.require_main_lane("a copy from the host");
  on_device();
  context_.upload(bytes, host_src, dst);
}

void CudaBackend::zero(size_t bytes, void* p) {
  const cudaStream_t s = on_device();
  if (bytes == 0) return;
  LAMINA_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
}

void CudaBackend::synchronize() {
  context_.require_main_lane("synchronize()");
  context_.require_not_capturing("synchronize()");
  const cudaStream_t s = on_device();
  context_.join_side_lane();
  context_.join_collective_lane();
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(s));
}

// ---------------------------------------------------------------------------------------
// BLAS
// ---------------------------------------------------------------------------------------

// An empty sum (k == 0): C = beta C, where beta == 0 does not read C (BLAS convention).
void CudaBackend::empty_product(int64_t count, float beta, float* c) {
  if (beta == 0) {
    fill(count, 0.0f, c);
  } else if (beta != 1) {
    scal(count, beta, c);
  }
}

// C (m, n) = alpha op(A) op(B) + beta C as cublasGemmEx: C^T = op(B)^T op(A)^T column-major.
void CudaBackend::gemm_ex(cudaDataType_t ab, cudaDataType_t c_type, cublasComputeType_t compute,
                          Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const void* a, const void* b, float beta, void* c) {
  const int64_t lda = trans_a == Transpose::kNo ? k : m;
  const int64_t ldb = trans_b == Transpose::kNo ? n : k;
  LAMINA_CUBLAS_CHECK(cublasGemmEx_64(context_.blas(), blas_op(trans_b), blas_op(trans_a), n, m,
                                      k, &alpha, b, ab, ldb, a, ab, lda, &beta, c, c_type, n,
                                      compute, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::lt_gemm(cudaDataType_t ab, Math math, Transpose trans_a, Transpose trans_b,
                          int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                          const void* b, float beta, float* c) {
  const LtKey key = lt_gemm_key(trans_a, trans_b, m, n, k, math, ab, CUDA_R_32F, {a, b, c});
  if (lt_matmul(key, alpha, b, a, nullptr, beta, c)) return;
  gemm_ex(ab, CUDA_R_32F,
          math == Math::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, trans_a,
          trans_b, m, n, k, alpha, a, b, beta, c);
}

// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C
void CudaBackend::gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, const float* b, float beta, float* c) {
  on_device();
  if (m == 0 || n == 0) return;
  if (k == 0) return empty_product(m * n, beta, c);
  // FP32 through a timed cuBLASLt plan, where Lamina's split-K kernel is a candidate too
  // (lt_matmul.cu); cublasGemmEx where there is no candidate.
  if (math() == Math::kFP32)
    return lt_gemm(CUDA_R_32F, Math::kFP32, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  tf32_gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

// y = alpha op(A) x + beta y, A (m, n): y (m), x (n) untransposed; y (n), x (m) transposed.
void CudaBackend::gemv(Transpose trans_a, int64_t m, int64_t n, float alpha, const float* a,
                       const float* x, float beta, float* y) {
  on_device();
  const int64_t out = trans_a == Transpose::kNo ? m : n;
  const int64_t in = trans_a == Transpose::kNo ? n : m;
  if (out == 0) return;
  if (in == 0) {
    if (beta == 0) {
      fill(out, 0.0f, y);
    } else if (beta != 1) {
      scal(out, beta, y);
    }
    return;
  }
  // Row-major A (m, n) is column-major A^T (n, m): A x is op T of that matrix.
  const cublasOperation_t op = trans_a == Transpose::kNo ? CUBLAS_OP_T : CUBLAS_OP_N;
  LAMINA_CUBLAS_CHECK(
      cublasSgemv_64(context_.blas(), op, n, m, &alpha, a, n, x, 1, &beta, y, 1));
}

void CudaBackend::axpy(int64_t n, float alpha, const float* x, float* y) {
  on_device();
  if (n == 0) return;
  LAMINA_CUBLAS_CHECK(cublasSaxpy_64(context_.blas(), n, &alpha, x, 1, y, 1));
}

void CudaBackend::scal(int64_t n, float alpha, float* x) {
  on_device();
  if (n == 0) return;
  LAMINA_CUBLAS_CHECK(cublasSscal_64(context_.blas(), n, &alpha, x, 1));
}

}  // namespace cuda_detail

// ---------------------------------------------------------------------------------------
// cuda.hpp
// ---------------------------------------------------------------------------------------

namespace {

// cudaGetDeviceCount's status; count is 0 unless it succeeded.
cudaError_t count_devices(int* count) {
  *count = 0;
  const cudaError_t status = cudaGetDeviceCount(count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    *count = 0;
  }
  return status;
}

// Why cudaGetDeviceCount failed, in words a user can act on.
std::string count_failure(cudaError_t status) {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  std::string reason = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  if (driver == 0) return "no NVIDIA driver was found; " + reason;
  return reason;
}

std::string version_string(int v) {  // CUDA's 1000 * major + 10 * minor
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cublas_version_string() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return "unknown";
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// "2 CUDA devices: 0 (NVIDIA H100 80GB HBM3), 1 (...)" or "0 CUDA devices (cudaErrorNoDevice:
// no CUDA-capable device is detected)".
std::string describe_devices() {
  int count = 0;
  const cudaError_t status = count_devices(&count);
  std::ostringstream out;
  out << count << " CUDA device" << (count == 1 ? "" : "s");
  if (status != cudaSuccess) {
    out << " (" << count_failure(status) << ")";
  } else if (count > 0) {
    out << ":";
    for (int d = 0; d < count; ++d) {
      cudaDeviceProp properties{};
      const bool known = cudaGetDeviceProperties(&properties, d) == cudaSuccess;
      if (!known) cudaGetLastError();
      out << (d > 0 ? "," : "") << " " << d << " (" << (known ? properties.name : "unknown")
          << ")";
    }
  }
  return out.str();
}

}  // namespace

bool cuda_compiled() { return true; }

int cuda_device_count() {
  int count = 0;
  count_devices(&count);
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    std::ostringstream choices;
    if (count > 0) choices << "Choose a device from 0 to " << count - 1 << ", or train";
    else choices << "Train";
    fail("GPU ", device, " was requested, but this machine has ", describe_devices(), ". ",
         choices.str(), " on the CPU (backend \"cpu\").");
  }
  return std::make_unique<cuda_detail::CudaBackend>(cuda_detail::CudaContext::get(device));
}

std::string cuda_device_query() {
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) cudaGetLastError();
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  std::ostringstream out;
  out << "CUDA runtime " << version_string(runtime) << ", "
      << (driver > 0 ? "driver supports CUDA " + version_string(driver) : "no NVIDIA driver")
      << ", cuBLAS " << cublas_version_string() << ", cuDNN "
      << cuda_detail::dnn_version_string() << "\n";
  int count = 0;
  const cudaError_t status = count_devices(&count);
  if (count == 0) {
    out << "No CUDA device found";
    if (status != cudaSuccess) out << " (" << count_failure(status) << ")";
    out << ". Train on the CPU (backend \"cpu\").\n";
    return out.str();
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    const cudaError_t queried = cudaGetDeviceProperties(&p, d);
    if (queried != cudaSuccess) {
      cudaGetLastError();
      out << "Device " << d << ": properties unavailable (" << cudaGetErrorName(queried)
          << ")\n";
      continue;
    }
    out << "Device " << d << ": " << p.name << "\n"
        << "  compute capability " << p.major << "." << p.minor << ", " << p.multiProcessorCount
        << " SMs\n"
        << "  memory " << p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0) << " GiB\n";
    char pci[32] = {};
    if (cudaDeviceGetPCIBusId(pci, sizeof(pci), d) == cudaSuccess) {
      out << "  PCI bus " << pci << "\n";
    } else {
      cudaGetLastError();
    }
  }
  return out.str();
}

}  // namespace lamina
