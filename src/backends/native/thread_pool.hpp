// The Native backend's worker threads for elementwise and row-wise loops.
//
// Workers sleep on a condition variable between jobs instead of spinning (as OpenMP's do by
// default): on two cores, spinning OpenMP workers beside OpenBLAS's made an MLP iteration
// 3.5x slower. And the pool only uses cores that OpenBLAS's own (spinning) workers leave
// free: with OpenBLAS on every core, loops run on the calling thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lamina {

class ThreadPool {
 public:
  // The process-wide pool: LAMINA_NUM_THREADS threads, else the hardware threads OpenBLAS
  // does not use (OPENBLAS_NUM_THREADS) plus the caller.
  static ThreadPool& instance();

  // Splits [0, n) into one contiguous range per thread and calls f(begin, end) on each; the
  // calling thread takes the first range. Returns when every range is done. Calls from
  // several threads are serialised.
  void run(int64_t n, const std::function<void(int64_t, int64_t)>& f);
  int threads() const { return int(workers_.size()) + 1; }

  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  explicit ThreadPool(int threads);
  void work(int index);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace lamina
