// The data layers' prefetch pool (batch_prefetcher.hpp).
#include "lamina/batch_prefetcher.hpp"

namespace lamina {

BatchPrefetcher::BatchPrefetcher(int depth, int threads, Read read, Decode decode)
    : depth_(depth), read_(std::move(read)), decode_(std::move(decode)), slots_(size_t(depth)) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BatchPrefetcher::work() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    // A batch depth ahead of the consumer waits for its slot to be released.
    changed_.wait(lock, [&] { return stop_ || claimed_ - consumed_ < depth_; });
    if (stop_) return;
    const int64_t b = claimed_++;
    Slot& slot = slots_[size_t(b % depth_)];
    slot.error = nullptr;
    // Records are read in batch order, by one thread at a time.
    changed_.wait(lock, [&] { return stop_ || read_next_ == b; });
    if (stop_) return;
    lock.unlock();
    try {
      read_(b, slot.records);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    ++read_next_;
    changed_.notify_all();
    lock.unlock();
    if (!slot.error) {
      try {
        decode_(b, slot.records, slot.batch);
      } catch (...) {
        slot.error = std::current_exception();
      }
    }
    lock.lock();
    slot.ready = b;
    changed_.notify_all();
  }
}

const HostBatch& BatchPrefetcher::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  Slot& slot = slots_[size_t(consumed_ % depth_)];
  changed_.wait(lock, [&] { return slot.ready == consumed_; });
  if (slot.error) std::rethrow_exception(slot.error);
  return slot.batch;
}

void BatchPrefetcher::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++consumed_;
  }
  changed_.notify_all();
}

}  // namespace lamina
