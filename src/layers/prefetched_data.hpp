// The base of the data layers whose examples are prepared on the host (Data over a database,
// ImageData over image files): a stream of records read and decoded ahead by a pool of
// threads into pinned host batches (batch_prefetcher.hpp), uploaded on an upload lane
// (backend.hpp: beside the device's computation, the host not waiting) into a ring of
// batches in device memory, from which each forward pass gathers its batch with operations
// whose arguments never change (BatchRows over the ring). So the training step stays
// capturable as a CUDA graph: before a replay of n passes, prepare_replay uploads the next n
// batches into the ring slots those passes read; a direct forward uploads its own batch.
// The ring holds 2n batches (at most kMaxRingBytes), so a replay's uploads go into the half
// the previous replay does not read and overlap its computation: an upload into slot s waits
// (by a mark) only for the pass that last read s.
//
// The stream: position s of the stream is one example; the source says which record it is
// (Data: s % records in key order; ImageData: its epoch's permutation). Pass p of the whole
// job takes positions start + p * workers * N onwards, worker r its N from r * N on (data
// parallel, as MnistData). State (snapshots): (seed, the position of the next pass, the
// record count), so a resumed run reads what an uninterrupted one would.
//
// Tops: data (N, C, H, W) and optionally label (N).
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "batch_rows.hpp"
#include "lamina/batch_prefetcher.hpp"
#include "lamina/datum.hpp"
#include "lamina/layer.hpp"

namespace lamina {

// What a prefetched data layer reads: records by stream position, and how one decodes.
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  // The records in the source (an epoch) and its name in messages ("layer 'x' (Data): LMDB
  // database 'path'").
  virtual int64_t records() const = 0;
  virtual std::string name() const = 0;
  // Reads this worker's `count` records from stream position `first` of the stream seeded
  // by `seed` on, in order. Called by one prefetch thread at a time; `first` grows from call
  // to call, except after the stream restarts.
  virtual void read(uint64_t seed, int64_t first, int64_t count, RawRecords& records) = 0;
  // Decodes the record at stream position `position` of the stream seeded by `seed` (its
  // random transform depends on both) into data (C, H, W floats) and *label. Called by any
  // prefetch thread, several at once.
  virtual void decode(uint64_t seed, int64_t position, const RawRecords::value_type& record,
                      float* data, float* label) const = 0;
};

class PrefetchedData : public Layer {
 public:
  // The device ring's size limit; a replay of more passes than fit runs directly instead.
  static constexpr size_t kMaxRingBytes = size_t{1} << 30;
  // Marks kept on the upload lane (the recent points the uploads may wait for).
  static constexpr int kMarks = 8;

  using Layer::Layer;

  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 1; }
  int max_tops() const override { return 2; }

  void forward(const Tensors& bottom, const Tensors& top) override;
  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  bool set_worker(int rank, int workers) override;
  std::vector<int64_t> state() const override;
  void set_state(const std::vector<int64_t>& state) override;
  bool prepare_replay(int64_t passes) override;
  void replayed(int64_t passes) override;

 protected:
  // For setup(): reads examples of shape `example` from `source`, `batch` a pass, `depth`
  // batches prepared ahead; shapes the tops (N, C, H, W) and (N) and the buffers, and starts
  // the stream at `position` (restart).
  void shape_stream(const Tensors& top, int64_t batch, const DatumShape& example,
                    std::unique_ptr<RecordSource> source, int depth, int64_t position);
  // The next pass takes stream position `position` onwards; batches prepared ahead go.
  void restart(int64_t position);
  // Caffe's rand_skip: the stream's start, drawn from the layer's seed in 0..rand_skip-1
  // (0 without one), so that workers or runs do not all start at the same example.
  int64_t skip_start(int64_t rand_skip) const;

 private:
  int64_t stride() const { return batch_ * workers_; }
  void start();
  void upload_next();
  void record_mark();
  void wait_for_slot(int64_t pass);
  bool shape_ring(int64_t passes);

  int64_t batch_ = 0;     // N, this worker's rows
  int64_t count_ = 0;     // values of one example, C * H * W
  int depth_ = 1;         // batches prepared ahead
  int64_t position_ = 0;  // stream position of the next pass's first row of the job
  int64_t workers_ = 1, rank_ = 0;
  bool labels_ = false;
  // The device ring: slots_ batches (twice the passes of a replay); pass p of the ring's
  // counter reads slot p % slots_.
  int64_t slots_ = 0;
  Buffer ring_data_;   // (slots * N, C * H * W) float
  Buffer ring_label_;  // (slots * N) float
  BatchRows rows_;        // its passes(): those gathered since the ring's counter restarted
  int64_t uploaded_ = 0;  // batches uploaded into the ring since then (>= rows_.passes())
  // Marks on the upload lane, oldest first: mark `id` follows the gathers of the passes
  // before `passes`.
  struct Mark {
    int64_t passes;
    int id;
  };
  std::deque<Mark> marks_;
  int next_mark_ = 0;
  bool ring_refused_ = false;  // a replay's ring was refused (logged once)
  std::unique_ptr<RecordSource> source_;
  std::unique_ptr<UploadLane> lane_;
  std::vector<HostBatch> buffers_;  // pinned, depth_ of them, lent to the prefetcher
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // last: its threads use source_
};

}  // namespace lamina
