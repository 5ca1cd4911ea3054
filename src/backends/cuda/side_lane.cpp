// The side lane (Backend::open_side_lane) on CUDA: the context's second lane (a stream with
// its own cuBLAS and cuDNN handles and workspaces), ordered against the main one by events.
// Forking makes the side stream wait for the main stream's work so far; joining makes the
// main stream wait for the side stream's. The collective lane (a gradient all-reduce beside
// backward) is forked from both lanes and joined to the main one the same way. Each is an
// event recorded on one stream and waited for by another (order_after): inside a stream
// capture they become the graph's edges (a branch and its merge), and none waits on the host.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {

void CudaContext::order_after(cudaStream_t waiter, cudaStream_t done, cudaEvent_t done_event) {
  LAMINA_CUDA_CHECK(cudaEventRecord(done_event, done));
  LAMINA_CUDA_CHECK(cudaStreamWaitEvent(waiter, done_event, 0));
}

void CudaContext::open_side_lane() {
  LAMINA_REQUIRE(!on_side_, "open_side_lane() was called on the side lane");
  ++side_open_;
}

void CudaContext::close_side_lane() {
  LAMINA_REQUIRE(side_open_ > 0, "close_side_lane() was called without open_side_lane()");
  on_side_ = false;
  if (--side_open_ == 0) join_side_lane();
}

void CudaContext::to_side_lane() {
  if (side_open_ == 0) return;
  LAMINA_REQUIRE(!on_side_, "to_side_lane() was called on the side lane already");
  order_after(lanes_[1].stream, lanes_[0].stream, main_done_);
  on_side_ = true;
  side_pending_ = true;
}

void CudaContext::join_side_lane() {
  if (!side_pending_) return;
  side_pending_ = false;
  order_after(lanes_[0].stream, lanes_[1].stream, side_done_);
}

void CudaContext::require_main_lane(const char* what) const {
  LAMINA_REQUIRE(!on_side_, what, " cannot run on the side lane (Backend::to_side_lane): it "
                 "waits for the device or copies between host and device; issue it before "
                 "to_side_lane() or after to_main_lane()");
}

cudaStream_t CudaContext::fork_collective_lane() {
  order_after(collective_, lanes_[0].stream, main_done_);
  // The side lane's work since its last join (parameter gradients).
  if (side_pending_) order_after(collective_, lanes_[1].stream, side_done_);
  collective_pending_ = true;
  return collective_;
}

void CudaContext::join_collective_lane() {
  leave_sms(0);
  if (!collective_pending_) return;
  collective_pending_ = false;
  order_after(lanes_[0].stream, collective_, collective_done_);
}

void CudaContext::leave_sms(int sms) {
  const int target = sms > 0 ? properties_.multiProcessorCount - sms : 0;  // 0: all
  if (target == blas_sms_) return;
  for (Lane& lane : lanes_) LAMINA_CUBLAS_CHECK(cublasSetSmCountTarget(lane.blas, target));
  blas_sms_ = target;
}

void CudaBackend::open_side_lane() { context_.open_side_lane(); }

void CudaBackend::close_side_lane() {
  on_device();
  context_.close_side_lane();
}

void CudaBackend::to_side_lane() {
  on_device();
  context_.to_side_lane();
}

void CudaBackend::to_main_lane() { context_.to_main_lane(); }

}  // namespace lamina::cuda_detail
