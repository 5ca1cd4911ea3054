// The data layers' prefetch pool (batch_prefetcher.hpp).
#include "lamina/batch_prefetcher.hpp"

#include <algorithm>

#include "lamina/common.hpp"

namespace lamina {

BatchPrefetcher::BatchPrefetcher(std::vector<HostBatch>& buffers, int threads, int64_t rows,
                                 Read read, Decode decode)
    : rows_(rows),
      // about two chunks a thread, so a slow chunk does not leave the others idle
      chunk_rows_(std::max<int64_t>(1, (rows + 2 * threads - 1) / (2 * threads))),
      read_(std::move(read)),
      decode_(std::move(decode)),
      slots_(buffers.size()) {
  LAMINA_REQUIRE(!buffers.empty() && threads > 0 && rows > 0,
                 "BatchPrefetcher needs a buffer, a thread and a row");
  for (size_t i = 0; i < buffers.size(); ++i) slots_[i].batch = &buffers[i];
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
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Decoding the oldest batch first; reading the next batch when its buffer is free.
    changed_.wait(lock, [&] {
      return stop_ || !chunks_.empty() ||
             (!reading_ && read_next_ - consumed_ < int64_t(slots_.size()));
    });
    if (stop_) return;
    if (!chunks_.empty()) {
      decode_chunk(lock);
    } else {
      read_batch(lock);
    }
  }
}

// Called and returns with the lock held.
void BatchPrefetcher::read_batch(std::unique_lock<std::mutex>& lock) {
  const int64_t b = read_next_++;
  reading_ = true;
  Slot& s = slot(b);
  lock.unlock();
  std::exception_ptr error;
  try {
    if (s.batch->fence) s.batch->fence->wait();  // an upload of the buffer's last batch
    read_(b, s.records);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  reading_ = false;
  s.error = error;
  s.error_row = -1;
  if (error) {
    s.ready = b;
  } else {
    s.chunks_left = 0;
    for (int64_t begin = 0; begin < rows_; begin += chunk_rows_, ++s.chunks_left)
      chunks_.push_back({b, begin, std::min(rows_, begin + chunk_rows_)});
  }
  changed_.notify_all();
}

// Called and returns with the lock held.
void BatchPrefetcher::decode_chunk(std::unique_lock<std::mutex>& lock) {
  const Chunk c = chunks_.front();
  chunks_.pop_front();
  Slot& s = slot(c.batch);
  lock.unlock();
  std::exception_ptr error;
  try {
    decode_(c.batch, s.records, c.begin, c.end, *s.batch);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  // The error of the first row that failed, whichever thread found it first.
  if (error && (!s.error || c.begin < s.error_row)) {
    s.error = error;
    s.error_row = c.begin;
  }
  if (--s.chunks_left == 0) {
    s.ready = c.batch;
    changed_.notify_all();
  }
}

HostBatch& BatchPrefetcher::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  Slot& s = slot(consumed_);
  changed_.wait(lock, [&] { return s.ready == consumed_; });
  if (s.error) std::rethrow_exception(s.error);
  return *s.batch;
}

void BatchPrefetcher::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++consumed_;
  }
  changed_.notify_all();
}

}  // namespace lamina
