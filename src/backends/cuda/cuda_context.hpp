// CudaContext: the process-wide state of one device, shared by every CudaBackend on it.
//
// One per device, created lazily (under a mutex) on first use and kept until the process
// exits. It binds to the primary context the CUDA runtime keeps for the device (Lamina never
// calls cuCtxCreate) and owns everything a step needs, so nothing is created per call, per
// layer or per backend:
//   - two lanes, each a non-blocking stream with what operations on it need: every kernel,
//     copy and library call runs on the main lane's stream, except the work a step sends to
//     the side lane (parameter gradients, their zeroing, advance_step: Backend::to_side_lane,
//     side_lane.cpp), and two events that order the lanes; a lane has
//       - a cuBLAS handle bound to its stream (default math mode: no TF32, so results match
//         the CPU) and cuBLAS's own workspace, fixed at creation (so cuBLAS allocates
//         nothing later and its calls can be captured into CUDA graphs), shared by the
//         lane's cuBLASLt calls (linear.cu),
//       - a cuDNN handle, created (for both lanes) on first use by a layer that needs it
//         (builds with cuDNN),
//       - a growable device workspace for scratch results inside one operation (cuDNN's
//         convolution workspace included: one buffer for the whole net),
//   - a third stream, the collective lane, for the gradient all-reduce of a data-parallel
//     job beside the backward pass (side_lane.cpp); an event per stream orders the three,
//   - the convolution plans: cuDNN descriptors and the algorithms chosen for each
//     convolution geometry, searched once per geometry (cudnn.cpp),
//   - pinned staging buffers that let copy_from_host return without waiting for the device,
//   - the fused Linear plans: cuBLASLt descriptors and algorithms by shape (linear.cu),
//   - whether the stream is being captured (cuda_graph.cpp): operations that would wait for
//     the device, copy from or to the host, or allocate refuse, naming themselves.
// Like the stream it owns, a context serves one host thread at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <mutex>
#include <string>

struct cudnnContext;  // cudnnHandle_t is cudnnContext*; cudnn.h stays in cudnn.cpp

namespace lamina::cuda_detail {

struct ConvPlans;    // defined in cudnn.cpp
struct LtPlans;      // defined in lt_matmul.cu

class CudaContext {
 public:
  // The context of device (0 <= device < cuda_device_count(), checked by the caller).
  static CudaContext& get(int device);

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  const cudaDeviceProp& properties() const { return properties_; }
  int sm_count() const { return properties_.multiProcessorCount; }
  // The main stream: graphs are captured and launched on it, synchronisation waits for it.
  cudaStream_t stream() const { return lanes_[0].stream; }
  // The stream and handles of the lane operations go to now (to_side_lane).
  cudaStream_t lane_stream() const { return lane().stream; }
  cublasHandle_t blas() const { return lane().blas; }
  // The lane's cuDNN handle, created (both lanes') on the first call; throws in builds
  // without cuDNN.
  cudnnContext* dnn();

  // Makes this device current on the calling thread (cheap when it already is).
  void make_current() const;

  // Stream capture (cuda_graph.cpp). While capturing, require_not_capturing throws an Error
  // naming `what`, the operation that cannot be part of a captured step.
  bool capturing() const { return capturing_; }
  void set_capturing(bool on) { capturing_ = on; }
  void require_not_capturing(const char* what) const;

  // The side lane (Backend::open_side_lane; side_lane.cpp). Between open and close (which
  // nest), to_side sends operations to the side stream after everything issued so far;
  // to_main sends them back without waiting; the outermost close (and join) make later
  // main-stream work wait for the side stream. Outside open/close, to_side does nothing.
  void open_side_lane();
  void close_side_lane();
  void to_side_lane();
  void to_main_lane() { on_side_ = false; }
  void join_side_lane();  // main waits for the side lane's work issued so far
  bool side_lane_open() const { return side_open_ > 0; }
  cudaStream_t side_stream() const { return lanes_[1].stream; }
  // Throws an Error naming `what` on the side lane: it waits for or copies on the main stream.
  void require_main_lane(const char* what) const;

  // The collective lane: a stream for the gradient all-reduce beside the backward pass
  // (Communicator::all_reduce_sum_beside; side_lane.cpp). fork_collective_lane makes it wait
  // for everything issued so far on both lanes and returns it; join_collective_lane makes
  // later main-stream work wait for everything issued on it. synchronize and copy_to_host
  // join it too.
  cudaStream_t fork_collective_lane();
  void join_collective_lane();
  cudaStream_t collective_stream() const { return collective_; }
  // The upload stream: uploads from pinned host memory beside the computation
  // (Backend::make_upload_lane; cuda_upload.cpp), created with its event on the first call
  // (a process without data layers has none). join_upload_lane makes later main-stream work
  // wait for everything issued on it so far.
  cudaStream_t upload_stream();
  void join_upload_lane() { order_after(lanes_[0].stream, upload_stream(), upload_done_); }
  // A collective's kernels need SMs of their own to run beside the backward pass: a GEMM
  // issued before them takes every SM for its wave of tiles, and they would wait for it.
  // leave_sms(sms) makes both lanes' cuBLAS calls target all SMs but sms
  // (cublasSetSmCountTarget; cuBLASLt's products through blas_sm_target) until the next
  // join_collective_lane; a captured step keeps the launches as made. cuDNN's convolutions
  // are not limited. collective_sms() is what the collectives get: an eighth of the SMs (16 of an
  // H200's 132), the CTAs NCCL is given.
  void leave_sms(int sms);
  // The SMs leave_sms left cuBLAS (0: all), which cuBLASLt products target too (lt_matmul.cu).
  int blas_sm_target() const { return blas_sms_; }
  int collective_sms() const { return std::max(1, properties_.multiProcessorCount / 8); }

  // At least bytes of the lane's device scratch memory, valid until the next call on the
  // lane. Operations on a stream use it one after another, so one buffer serves them all; it
  // grows, never shrinks.
  void* workspace(size_t bytes);
  // The workspace cut into pieces of the given sizes, in order, each at a 256-byte boundary
  // (the first at its start).
  template <size_t N>
  std::array<char*, N> workspace_pieces(const std::array<size_t, N>& bytes) {
    size_t offsets[N + 1] = {0};
    for (size_t i = 0; i < N; ++i) offsets[i + 1] = offsets[i] + (bytes[i] + 255) / 256 * 256;
    char* base = static_cast<char*>(workspace(offsets[N]));
    std::array<char*, N> pieces;
    for (size_t i = 0; i < N; ++i) pieces[i] = base + offsets[i];
    return pieces;
  }
  size_t workspace_bytes() const { return lane().workspace_bytes; }
  // Whether p points into the lane's workspace (an operand that the next workspace() call's
  // user would overwrite).
  bool in_workspace(const void* p) const {
    const char* w = static_cast<const char*>(lane().workspace);
    const char* q = static_cast<const char*>(p);
    return w != nullptr && q >= w && q < w + lane().workspace_bytes;
  }
  // Grows the main lane's workspace to at least main_bytes and the side lane's to side_bytes
  // ahead of the operations that need them (a convolution's plan).
  void reserve_workspaces(size_t main_bytes, size_t side_bytes);
  // How many times a lane's workspace has moved (grown): a recording that uses it holds a
  // stale pointer once this changes.
  int64_t workspace_moves() const { return workspace_moves_; }

  // The cuBLASLt products' plans (descriptors and the algorithm chosen) by LtKey, created
  // on the first call; defined in lt_matmul.cu.
  LtPlans& lt_plans();
  // cuBLAS's workspace of the current lane (fixed at creation), which cuBLASLt calls use too:
  // everything on a stream runs one operation at a time.
  void* blas_workspace() const { return lane().blas_workspace; }
  static constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
  // The current lane's tile counters of the split-K product (split_k_gemm.hpp), zeroed once.
  unsigned* split_k_counters() const { return lane().split_k_counters; }

  // The convolution plans of this device (cuDNN descriptors and chosen algorithms by
  // ConvGeometry), created on the first call; defined in cudnn.cpp.
  ConvPlans& conv_plans();

  // Copies bytes from host_src to device memory dst on the stream. host_src may be freed as
  // soon as this returns: small copies go through pinned staging buffers (no wait for the
  // device unless the staging buffer is still in use), large ones wait for the copy.
  void upload(size_t bytes, const void* host_src, void* dst);

  // cudaMalloc on this device; an out-of-memory error says how much was asked and is free.
  void* allocate(size_t bytes, const char* purpose) const;

 private:
  explicit CudaContext(int device);
  void release() noexcept;  // undoes a partly finished constructor
  // A stream and what operations on it use.
  struct Lane {
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void* blas_workspace = nullptr;  // kBlasWorkspaceBytes
    unsigned* split_k_counters = nullptr;  // kSplitKCounters
    cudnnContext* dnn = nullptr;     // created by dnn()
    void* workspace = nullptr;       // workspace()
    size_t workspace_bytes = 0;
  };
  const Lane& lane() const { return lanes_[on_side_ ? 1 : 0]; }
  Lane& lane() { return lanes_[on_side_ ? 1 : 0]; }
  void* grow_workspace(Lane& lane, size_t bytes);
  // Creates the lane's stream and cuBLAS handle and workspace.
  void create_lane(Lane& lane);

  // A pinned host buffer and the event recorded after the last copy out of it.
  struct StagingSlot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t copied = nullptr;
    bool pending = false;  // copied has been recorded and may not have completed
  };
  static constexpr int kStagingSlots = 4;
  static constexpr size_t kMaxStagedBytes = size_t{8} << 20;

  int device_;
  cudaDeviceProp properties_{};
  std::array<Lane, 2> lanes_{};  // main, side
  std::once_flag dnn_once_;
  std::once_flag conv_plans_once_;
  ConvPlans* conv_plans_ = nullptr;  // owned; lives as long as the context (the process)
  std::once_flag lt_plans_once_;
  LtPlans* lt_plans_ = nullptr;  // the same
  int64_t workspace_moves_ = 0;
  // One event per stream, recorded on it when another stream is to wait for its work so far
  // (order_after): a wait takes the event's latest record, so one serves every wait.
  cudaEvent_t main_done_ = nullptr;
  cudaEvent_t side_done_ = nullptr;
  cudaEvent_t collective_done_ = nullptr;
  // `waiter` runs what is issued to it from now on after everything issued so far to `done`
  // (whose event is `done_event`).
  void order_after(cudaStream_t waiter, cudaStream_t done, cudaEvent_t done_event);
  int side_open_ = 0;           // open_side_lane calls not closed yet
  bool on_side_ = false;        // operations go to the side stream
  bool side_pending_ = false;   // the side stream has work the main stream has not waited for
  cudaStream_t collective_ = nullptr;  // the collective lane
  std::once_flag upload_once_;
  cudaStream_t upload_ = nullptr;      // the upload lane
  cudaEvent_t upload_done_ = nullptr;
  bool collective_pending_ = false;  // collective_ has work the main stream has not waited for
  int blas_sms_ = 0;                 // the lanes' cuBLAS SM target (0: every SM)
  bool capturing_ = false;
  std::array<StagingSlot, kStagingSlots> staging_{};
  int next_slot_ = 0;
};

// Implemented in cudnn.cpp, the one file that includes cudnn.h.
cudnnContext* create_dnn_handle(cudaStream_t stream);  // throws without cuDNN
std::string dnn_version_string();  // "9.1.0 (compiled against 9.1.0)" or "not built with cuDNN"

// The convolution algorithms chosen on the device, a line per geometry, and the reverse:
// a line of that text remembered (its geometry takes those algorithms from now on, instead
// of timing them); false if the line is not one (cudnn_search.cpp).
std::string conv_choices(CudaContext& context);
bool reuse_conv_choice(CudaContext& context, const std::string& line);
// The same for the cuBLASLt products' algorithms (lt_matmul.cu): "gemm ..." lines.
std::string lt_choices(CudaContext& context);
bool reuse_lt_choice(CudaContext& context, const std::string& line);

// Counts one convolution algorithm search in cuda_diagnostics() (cudnn.cpp calls it).
void count_conv_algorithm_search();

}  // namespace lamina::cuda_detail
