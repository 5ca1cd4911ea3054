// A pool of threads that prepares a data layer's batches ahead of their use, in a bounded
// queue `depth` deep: batch b is read in order (read(b, records), one thread at a time, in
// batch order, as a database cursor needs), then decoded on any thread (decode(b, records,
// batch)), and handed to the consumer in batch order. What a batch holds depends only on its
// number, never on which thread made it or when. An exception thrown by read or decode is
// kept with its batch and rethrown by take() when that batch's turn comes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lamina {

// One batch on the host: data (N, ...) and labels (N).
struct HostBatch {
  std::vector<float> data, label;
};

// The raw (key, value) records of one batch, as read.
using RawRecords = std::vector<std::pair<std::string, std::string>>;

class BatchPrefetcher {
 public:
  using Read = std::function<void(int64_t batch, RawRecords& records)>;
  using Decode = std::function<void(int64_t batch, const RawRecords& records, HostBatch& out)>;

  // Starts `threads` threads preparing batches 0, 1, ...
  BatchPrefetcher(int depth, int threads, Read read, Decode decode);
  // Stops the threads (a read or decode under way finishes first).
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next batch, waiting for it; valid until release(). Rethrows its read or decode error.
  const HostBatch& take();
  // Frees the batch take() returned, for a batch depth ahead.
  void release();

 private:
  struct Slot {
    RawRecords records;
    HostBatch batch;
    std::exception_ptr error;
    int64_t ready = -1;  // the batch the slot holds, once prepared
  };
  void work();

  const int depth_;
  Read read_;
  Decode decode_;
  std::vector<Slot> slots_;  // batch b in slots_[b % depth]
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t claimed_ = 0;    // batches a thread has taken on
  int64_t read_next_ = 0;  // the batch whose records are read next
  int64_t consumed_ = 0;   // batches released
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lamina
