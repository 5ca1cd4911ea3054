// The NCCL communicator (CUDA builds with LAMINA_USE_NCCL): GPU workers, one per process,
// summing device memory in stream order: on the main stream, or (the gradient buckets
// beside the backward pass) on the context's collective lane, forked from and joined to
// the main stream by events (the whole lane, or one sum: an event recorded after each).
// While sums run beside, the GEMMs leave NCCL's CTAs their SMs (CudaContext::leave_sms).
// Nothing waits for the host and a captured step holds the all-reduces as graph nodes.
// Host collectives (start-up, tests, display points) stage through a small device buffer
// and wait for it.
#include <glog/logging.h>
#include <nccl.h>

#include <cstring>
#include <vector>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "lamina/common.hpp"
#include "lamina/communicator.hpp"

namespace lamina {
namespace {

using cuda_detail::CudaContext;

void check(ncclResult_t status, const char* what) {
  if (status == ncclSuccess) return;
  fail("NCCL ", what, " failed: ", ncclGetErrorString(status),
       status == ncclSystemError || status == ncclRemoteError
           ? " (another worker may have stopped; NCCL_DEBUG=INFO says more)"
           : "");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int device, int rank, int size, const NcclId& id)
      : Communicator(rank, size), context_(CudaContext::get(device)) {
    context_.make_current();
    ncclUniqueId unique;
    static_assert(sizeof(unique) == sizeof(NcclId), "ncclUniqueId is 128 bytes");
    std::memcpy(&unique, id.data(), sizeof(unique));
    // NCCL's kernels take collective_sms() CTAs, which the backward pass's GEMMs leave
    // free (start_beside).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.maxCTAs = context_.collective_sms();
    check(ncclCommInitRankConfig(&comm_, size, unique, rank, &config), "communicator set-up");
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override {
    for (cudaEvent_t event : sum_done_) cudaEventDestroy(event);
    ncclCommDestroy(comm_);
  }

  std::string description() const override {
    return "NCCL, " + std::to_string(size()) + " worker" + (size() == 1 ? "" : "s");
  }
  void all_reduce_sum(float* data, int64_t count) override {
    context_.make_current();
    check(ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum, comm_, context_.stream()),
          "all-reduce");
  }
  bool reduces_beside() const override { return true; }
  void all_reduce_sum_beside(float* data, int64_t count) override {
    context_.require_main_lane("an all-reduce beside the backward pass");
    context_.make_current();
    const cudaStream_t lane = context_.fork_collective_lane();
    check(ncclAllReduce(data, data, size_t(count), ncclFloat, ncclSum, comm_, lane),
          "all-reduce");
    CHECK_LT(issued_, int(sum_done_.size())) << "more sums beside one backward pass than "
                                              << "prepare_beside prepared";
    LAMINA_CUDA_CHECK(cudaEventRecord(sum_done_[issued_++], lane));
  }
  void start_beside() override {
    issued_ = 0;
    if (size() > 1) context_.leave_sms(context_.collective_sms());  // one worker sums nothing
  }
  void join_beside() override { context_.join_collective_lane(); }
  void prepare_beside(int sums) override {
    context_.make_current();
    while (int(sum_done_.size()) < sums) {
      cudaEvent_t event = nullptr;
      LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      sum_done_.push_back(event);
    }
  }
  void wait_beside(int k) override {
    CHECK(k >= 0 && k < issued_) << "wait_beside(" << k << "): " << issued_
                                 << " sums were issued beside since start_beside()";
    context_.require_main_lane("waiting for a sum beside the backward pass");
    LAMINA_CUDA_CHECK(cudaStreamWaitEvent(context_.stream(), sum_done_[k], 0));
  }
  void broadcast(float* data, int64_t count, int root) override {
    context_.make_current();
    check(ncclBroadcast(data, data, size_t(count), ncclFloat, root, comm_, context_.stream()),
          "broadcast");
  }
  void all_reduce_sum_host(double* data, int64_t count) override {
    const size_t bytes = sizeof(double) * size_t(count);
    void* device = stage(bytes, data);
    check(ncclAllReduce(device, device, size_t(count), ncclDouble, ncclSum, comm_,
                        context_.stream()),
          "all-reduce");
    unstage(bytes, device, data);
  }
  void broadcast_host(void* data, int64_t bytes, int root) override {
    void* device = stage(size_t(bytes), data);
    check(ncclBroadcast(device, device, size_t(bytes), ncclUint8, root, comm_, context_.stream()),
          "broadcast");
    unstage(size_t(bytes), device, data);
  }

 private:
  // Copies host bytes into the main lane's workspace (scratch of one operation: this
  // collective, which waits for itself in unstage).
  void* stage(size_t bytes, const void* host) {
    context_.require_not_capturing("a collective over host values");
    context_.require_main_lane("a collective over host values");
    context_.make_current();
    void* device = context_.workspace(bytes);
    LAMINA_CUDA_CHECK(
        cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context_.stream()));
    return device;
  }
  void unstage(size_t bytes, const void* device, void* host) {
    LAMINA_CUDA_CHECK(
        cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, context_.stream()));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(context_.stream()));
  }

  CudaContext& context_;
  ncclComm_t comm_ = nullptr;
  std::vector<cudaEvent_t> sum_done_;  // recorded after each sum beside (prepare_beside)
  int issued_ = 0;                     // sums issued beside since start_beside()
};

}  // namespace

bool nccl_compiled() { return true; }

NcclId nccl_new_id() {
  ncclUniqueId unique;
  check(ncclGetUniqueId(&unique), "id creation");
  NcclId id;
  std::memcpy(id.data(), &unique, sizeof(unique));
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(int device, int rank, int size,
                                                     const NcclId& id) {
  return std::make_unique<NcclCommunicator>(device, rank, size, id);
}

std::unique_ptr<Communicator> make_nccl_communicator(int device, Communicator& host) {
  NcclId id{};
  if (host.rank() == 0) id = nccl_new_id();
  host.broadcast_host(id.data(), int64_t(id.size()), 0);
  return make_nccl_communicator(device, host.rank(), host.size(), id);
}

}  // namespace lamina
