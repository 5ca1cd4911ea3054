// The CUDA backend's algorithm choices as text (Backend::algorithm_choices): a first line
// naming the device and library versions they were made with, then a line per choice
// (cudnn_search.cpp writes and reads the convolutions' lines, lt_matmul.cu the cuBLASLt
// products').
#include <cublas_v2.h>
#include <glog/logging.h>

#include <sstream>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_context.hpp"

namespace lamina::cuda_detail {
namespace {

constexpr char kHeading[] = "algorithms for ";

// "NVIDIA H200 (sm_90), cuDNN 9.14.0 (built against 9.14.0), cuBLAS 130100"
std::string made_with(const CudaContext& context) {
  std::ostringstream out;
  const cudaDeviceProp& p = context.properties();
  int blas_version = 0;
  cublasGetVersion(context.blas(), &blas_version);
  out << p.name << " (sm_" << p.major << p.minor << "), cuDNN " << dnn_version_string()
      << ", cuBLAS " << blas_version;
  return out.str();
}

}  // namespace

std::string CudaBackend::algorithm_choices() const {
  const std::string lines = conv_choices(context_) + lt_choices(context_);
  if (lines.empty()) return {};
  return kHeading + made_with(context_) + "\n" + lines;
}

void CudaBackend::reuse_algorithm_choices(const std::string& choices) {
  std::istringstream in(choices);
  std::string line;
  if (!std::getline(in, line)) return;
  const std::string here = made_with(context_);
  if (line != kHeading + here) {
    LOG(WARNING) << "The solver state's algorithm choices were made for '" << line
                 << "'; this run has " << here << " and chooses its own (the resumed run may "
                 << "differ from the interrupted one in the last bits)";
    return;
  }
  int64_t ignored = 0;
  std::string first_ignored;
  while (std::getline(in, line)) {
    if (reuse_conv_choice(context_, line) || reuse_lt_choice(context_, line)) continue;
    if (ignored++ == 0) first_ignored = line.substr(0, 200);
  }
  if (ignored > 0) {
    LOG(WARNING) << "Ignoring " << ignored << " algorithm choice line(s) Lamina does not "
                 << "recognise, the first: '" << first_ignored << "'";
  }
}

}  // namespace lamina::cuda_detail
