// Timing candidate algorithms on the device (lt_matmul.cu, cudnn_graph.cpp,
// cudnn_search.cpp): scratch memory and an event pair that free themselves, so an error
// thrown while timing leaks nothing, and the mean time of a few runs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/cuda_check.hpp"

namespace lamina::cuda_detail {

// bytes of device memory, or none (get() null) when they are not there: the allocation
// error is cleared, and the caller goes without.
class ScratchMemory {
 public:
  explicit ScratchMemory(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&p_, bytes) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
    }
  }
  ~ScratchMemory() {
    if (p_) cudaFree(p_);
  }
  ScratchMemory(const ScratchMemory&) = delete;
  ScratchMemory& operator=(const ScratchMemory&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// Milliseconds between start() and stop() on a stream, waited for.
class DeviceTimer {
 public:
  explicit DeviceTimer(cudaStream_t stream) : stream_(stream) {
    LAMINA_CUDA_CHECK(cudaEventCreate(&start_));
    LAMINA_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~DeviceTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start() { LAMINA_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  float stop() {
    LAMINA_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    LAMINA_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LAMINA_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The mean milliseconds of `runs` calls of run() on stream after one call to warm up; run()
// returns whether it succeeded. -1 when a call fails (the CUDA error it left is cleared).
template <class Run>
float mean_ms(cudaStream_t stream, int runs, Run run) {
  DeviceTimer timer(stream);
  bool ok = run();
  timer.start();
  for (int r = 0; r < runs && ok; ++r) ok = run();
  const float ms = timer.stop() / runs;
  if (!ok) {
    cudaGetLastError();
    return -1;
  }
  return ms;
}

// The mean milliseconds of one call of run() where `runs` calls are recorded as a CUDA graph
// on stream and replayed (after one replay to warm up), as a training step replays them: for
// a kernel of a few microseconds, timing launches one by one measures the launches. Where the
// calls cannot be recorded (a call fails or throws while recording, or the stream is being
// recorded already), mean_ms.
template <class Run>
float graph_mean_ms(cudaStream_t stream, int runs, Run run) {
  struct Recording {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Recording() {
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
    }
  } recording;
  cudaStreamCaptureStatus before = cudaStreamCaptureStatusNone;
  bool ok = cudaStreamIsCapturing(stream, &before) == cudaSuccess &&
            before == cudaStreamCaptureStatusNone &&
            cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (ok) {
    try {
      for (int r = 0; r < runs && ok; ++r) ok = run();
    } catch (...) {
      ok = false;  // timed the other way below, which throws again if the call is at fault
    }
    ok = cudaStreamEndCapture(stream, &recording.graph) == cudaSuccess && ok;
    ok = ok && cudaGraphInstantiate(&recording.exec, recording.graph, 0) == cudaSuccess;
  }
  if (!ok) {
    cudaGetLastError();
    return mean_ms(stream, runs, run);
  }
  DeviceTimer timer(stream);
  LAMINA_CUDA_CHECK(cudaGraphLaunch(recording.exec, stream));
  timer.start();
  LAMINA_CUDA_CHECK(cudaGraphLaunch(recording.exec, stream));
  return timer.stop() / runs;
}

}  // namespace lamina::cuda_detail
