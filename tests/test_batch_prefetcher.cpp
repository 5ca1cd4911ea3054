// BatchPrefetcher: batches come in order with contents that depend only on their number, for
// any number of threads, buffers and rows; records are read one batch at a time in batch
// order; a read or decode error comes back from take() at its batch's turn (the first
// failing row's when several fail); a buffer is not filled again before its fence passes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "lamina/batch_prefetcher.hpp"
#include "lamina/native_backend.hpp"

namespace lamina {
namespace {

// Row r of batch b: value 1000 b + r, label b.
std::vector<HostBatch> buffers(Backend& backend, int count, int64_t rows) {
  std::vector<HostBatch> out{size_t(count)};
  for (HostBatch& b : out) {
    b.data = PinnedArray<float>(backend, size_t(rows));
    b.label = PinnedArray<float>(backend, size_t(rows));
    b.fence = backend.make_fence();
  }
  return out;
}

TEST(BatchPrefetcher, BatchesInOrderWhateverTheThreadsAndBuffers) {
  NativeBackend backend;
  for (int threads : {1, 3, 8})
    for (int depth : {1, 2, 4})
      for (int64_t rows : {1, 7}) {
        SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(depth) +
                     " buffers, " + std::to_string(rows) + " rows");
        std::vector<HostBatch> held = buffers(backend, depth, rows);
        std::atomic<int> reading{0};
        std::atomic<int64_t> last_read{-1};
        std::atomic<bool> overlapped{false}, out_of_order{false};
        BatchPrefetcher pool(
            held, threads, rows,
            [&](int64_t b, RawRecords& records) {
              if (reading.fetch_add(1) != 0) overlapped = true;
              if (last_read.exchange(b) != b - 1) out_of_order = true;
              records.assign(size_t(rows), {std::to_string(b), ""});
              std::this_thread::sleep_for(std::chrono::microseconds(50));
              reading.fetch_sub(1);
            },
            [&](int64_t b, const RawRecords& records, int64_t begin, int64_t end,
                HostBatch& out) {
              for (int64_t r = begin; r < end; ++r) {
                out.data[size_t(r)] = float(1000 * std::stoi(records[size_t(r)].first) + r);
                out.label[size_t(r)] = float(b);
              }
            });
        for (int64_t b = 0; b < 12; ++b) {
          HostBatch& batch = pool.take();
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(batch.data[size_t(r)], float(1000 * b + r)) << "batch " << b;
            ASSERT_EQ(batch.label[size_t(r)], float(b));
          }
          pool.release();
        }
        EXPECT_FALSE(overlapped) << "two threads read at once";
        EXPECT_FALSE(out_of_order) << "batches were read out of order";
      }
}

TEST(BatchPrefetcher, ErrorsComeBackAtTheirBatchsTurn) {
  NativeBackend backend;
  std::vector<HostBatch> held = buffers(backend, 3, 6);
  BatchPrefetcher pool(
      held, 4, 6,
      [](int64_t b, RawRecords& records) {
        if (b == 4) throw std::runtime_error("read of batch 4");
        records.assign(6, {});
      },
      [](int64_t b, const RawRecords& /*records*/, int64_t begin, int64_t end,
         HostBatch& /*out*/) {
        // Rows 2 and 5 of batch 1 fail; row 2's error is the one reported.
        for (int64_t r = begin; r < end; ++r)
          if (b == 1 && (r == 2 || r == 5))
            throw std::runtime_error("decode of row " + std::to_string(r));
      });
  pool.take();
  pool.release();
  for (int attempt = 0; attempt < 2; ++attempt) {  // the error stays until released
    try {
      pool.take();
      FAIL() << "batch 1 must fail";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "decode of row 2");
    }
  }
  pool.release();
  pool.take();
  pool.release();
  pool.take();
  pool.release();
  EXPECT_THROW(pool.take(), std::runtime_error);
}

// A fence that passes only once the test opens it.
class GateFence final : public UploadFence {
 public:
  explicit GateFence(std::atomic<bool>& open) : open_(open) {}
  void record() override { recorded_ = true; }
  void wait() override {
    if (!recorded_) return;
    while (!open_) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

 private:
  std::atomic<bool>& open_;
  bool recorded_ = false;
};

TEST(BatchPrefetcher, ABufferIsNotFilledAgainBeforeItsFencePasses) {
  NativeBackend backend;
  std::atomic<bool> open{false};
  std::vector<HostBatch> held = buffers(backend, 1, 1);
  held[0].fence = std::make_unique<GateFence>(open);
  std::atomic<int64_t> read{0};
  BatchPrefetcher pool(
      held, 2, 1,
      [&](int64_t /*b*/, RawRecords& records) {
        records.assign(1, {});
        ++read;
      },
      [](int64_t b, const RawRecords&, int64_t, int64_t, HostBatch& out) {
        out.data[0] = float(b);
      });
  HostBatch& first = pool.take();
  EXPECT_EQ(first.data[0], 0.0f);
  first.fence->record();  // as after an upload from the buffer
  pool.release();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(read.load(), 1) << "batch 1 was read into a buffer whose upload had not passed";
  open = true;
  EXPECT_EQ(pool.take().data[0], 1.0f);
  pool.release();
}

}  // namespace
}  // namespace lamina
