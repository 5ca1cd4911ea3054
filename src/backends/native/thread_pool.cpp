#include "thread_pool.hpp"

#include <cblas.h>

#include <cstdlib>
#include <string>

namespace lamina {

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("LAMINA_NUM_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return n;
    }
    // OpenBLAS's workers spin for a long while after each call, on every core they use; a
    // thread of ours woken on such a core waits for the scheduler to preempt the spinner.
    // So the pool takes the cores OpenBLAS leaves free, plus the calling thread.
    const int cores = std::max(1, int(std::thread::hardware_concurrency()));
    return std::max(1, cores - openblas_get_num_threads() + 1);
  }());
  return pool;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

namespace {
// The index-th of parts contiguous ranges of [0, n).
std::pair<int64_t, int64_t> range(int64_t n, int parts, int index) {
  return {n * index / parts, n * (index + 1) / parts};
}
}  // namespace

void ThreadPool::run(int64_t n, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  if (workers_.empty()) return f(0, n);
  std::lock_guard<std::mutex> call(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &f;
    n_ = n;
    pending_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  const auto mine = range(n, threads(), 0);
  f(mine.first, mine.second);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
    }
    const auto mine = range(n, threads(), index);
    if (mine.first < mine.second) (*job)(mine.first, mine.second);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace lamina
