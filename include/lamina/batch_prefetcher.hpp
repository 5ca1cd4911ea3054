// A pool of threads that prepares a data layer's batches ahead of their use, in a bounded
// queue of `depth` batch buffers: batch b's records are read in order (read(b, records), one
// thread at a time, in batch order, as a database cursor needs), then its rows are decoded in
// chunks by any threads at once (decode(b, records, begin, end, batch) for rows [begin, end)),
// and the batch is handed to the consumer in batch order. What a batch holds depends only on
// its number, never on which thread made it or when. An exception thrown by read or decode
// is kept with its batch and rethrown by take() when that batch's turn comes.
//
// The buffers are the caller's (HostBatch: pinned host memory and an upload fence, so the
// consumer can upload a batch without waiting for the copy): before a buffer is filled
// again, the pool waits on its fence, on its own threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/pinned_array.hpp"

namespace lamina {

// One batch on the host: data (N, ...) and labels (N), and the fence the consumer records
// after uploading them.
struct HostBatch {
  PinnedArray<float> data, label;
  std::unique_ptr<UploadFence> fence;  // last: destroyed first, waiting for its uploads
};

// The raw (key, value) records of one batch, as read.
using RawRecords = std::vector<std::pair<std::string, std::string>>;

class BatchPrefetcher {
 public:
  using Read = std::function<void(int64_t batch, RawRecords& records)>;
  using Decode = std::function<void(int64_t batch, const RawRecords& records, int64_t begin,
                                    int64_t end, HostBatch& out)>;

  // Starts `threads` threads preparing batches 0, 1, ... of `rows` rows into the buffers
  // (batch b into buffers[b % buffers.size()]; one buffer at least), which must outlive
  // the pool.
  BatchPrefetcher(std::vector<HostBatch>& buffers, int threads, int64_t rows, Read read,
                  Decode decode);
  // Stops the threads (reads and decodes under way finish first).
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next batch, waiting for it; valid until release(). Rethrows its read or decode error.
  HostBatch& take();
  // Hands the batch take() returned back, for a batch depth ahead (once its fence passes).
  void release();

 private:
  struct Slot {
    RawRecords records;
    HostBatch* batch = nullptr;
    std::exception_ptr error;
    int64_t error_row = -1;  // the first row of the chunk that threw (-1: the read)
    int chunks_left = 0;
    int64_t ready = -1;  // the batch the slot holds, once prepared
  };
  struct Chunk {
    int64_t batch, begin, end;
  };
  void work();
  void read_batch(std::unique_lock<std::mutex>& lock);
  void decode_chunk(std::unique_lock<std::mutex>& lock);
  Slot& slot(int64_t b) { return slots_[size_t(b % int64_t(slots_.size()))]; }

  const int64_t rows_;
  const int64_t chunk_rows_;  // rows per decode chunk
  Read read_;
  Decode decode_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Chunk> chunks_;  // decodes waiting for a thread, oldest batch first
  int64_t read_next_ = 0;     // the batch whose records are read next
  bool reading_ = false;      // a thread is reading
  int64_t consumed_ = 0;      // batches released
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lamina
