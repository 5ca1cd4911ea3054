// The side lane (Backend::open_side_lane) on CUDA: the context's second lane (a stream with
// its own cuBLAS and cuDNN handles and workspaces), ordered against the main one by two events.
// Forking records `fork_` on the main stream and makes the side stream wait for it; joining
// records `join_` on the side stream and makes the main stream wait. Both work the same
// inside a stream capture, where they become the graph's edges (a branch and its merge), and
// neither waits on the host. The collective lane (a gradient all-reduce beside backward) is
// forked and joined the same way, from both lanes.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {

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
  LAMINA_CUDA_CHECK(cudaEventRecord(fork_, lanes_[0].stream));
  LAMINA_CUDA_CHECK(cudaStreamWaitEvent(lanes_[1].stream, fork_, 0));
  on_side_ = true;
  side_pending_ = true;
}

void CudaContext::join_side_lane() {
  if (!side_pending_) return;
  side_pending_ = false;
  LAMINA_CUDA_CHECK(cudaEventRecord(join_, lanes_[1].stream));
  LAMINA_CUDA_CHECK(cudaStreamWaitEvent(lanes_[0].stream, join_, 0));
}

void CudaContext::require_main_lane(const char* what) const {
  LAMINA_REQUIRE(!on_side_, what, " cannot run on the side lane (Backend::to_side_lane): it "
                 "waits for the device or copies between host and device; issue it before "
                 "to_side_lane() or after to_main_lane()");
}

cudaStream_t CudaContext::fork_collective_lane() {
  LAMINA_CUDA_CHECK(cudaEventRecord(collective_after_main_, lanes_[0].stream));
  LAMINA_CUDA_CHECK(cudaStreamWaitEvent(collective_, collective_after_main_, 0));
  if (side_pending_) {  // the side lane has work since its last join (parameter gradients)
    LAMINA_CUDA_CHECK(cudaEventRecord(collective_after_side_, lanes_[1].stream));
    LAMINA_CUDA_CHECK(cudaStreamWaitEvent(collective_, collective_after_side_, 0));
  }
  collective_pending_ = true;
  return collective_;
}

void CudaContext::join_collective_lane() {
  if (!collective_pending_) return;
  collective_pending_ = false;
  LAMINA_CUDA_CHECK(cudaEventRecord(collective_join_, collective_));
  LAMINA_CUDA_CHECK(cudaStreamWaitEvent(lanes_[0].stream, collective_join_, 0));
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
