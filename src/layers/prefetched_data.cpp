// The prefetched data layers' stream, host buffers and device ring (prefetched_data.hpp).
#include "prefetched_data.hpp"

#include <glog/logging.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "lamina/counter_rng.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

constexpr int kMaxThreads = 16;
// The counter of the rand_skip draw: beyond every example's (data_transformer.hpp draws
// three per example from 0 up).
constexpr uint64_t kSkipCounter = ~uint64_t{0};

// The cores this process may run on (its affinity mask, which containers and taskset set),
// or the machine's when that cannot be read.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return int(std::thread::hardware_concurrency());
}

}  // namespace

void PrefetchedData::shape_stream(const Tensors& top, int64_t batch, const DatumShape& example,
                                  std::unique_ptr<RecordSource> source, int depth,
                                  int64_t position) {
  prefetcher_.reset();  // its threads use the source and the buffers replaced below
  batch_ = batch;
  count_ = example.count();
  depth_ = depth;
  source_ = std::move(source);
  top[0]->reshape({batch_, example.channels, example.height, example.width});
  labels_ = top.size() > 1;
  if (labels_) top[1]->reshape({batch_});
  buffers_.clear();  // their fences belong to the lane
  if (!lane_) lane_ = backend_.make_upload_lane(kMarks);
  buffers_.resize(size_t(depth_));
  for (HostBatch& b : buffers_) {
    b.data = PinnedArray<float>(backend_, size_t(batch_ * count_));
    b.label = PinnedArray<float>(backend_, size_t(batch_));
    b.fence = lane_->make_fence();
  }
  slots_ = 0;
  shape_ring(1);
  restart(position);
}

// The ring starts over too: batches uploaded ahead are dropped, and the ring's counter, on the
// device and the host, goes back to 0. The host's count of passes may be ahead of the
// device's (passes recorded in a capture that failed never ran), so the next uploads wait
// for every gather issued so far instead of for the pass the count names.
void PrefetchedData::restart(int64_t position) {
  prefetcher_.reset();
  position_ = position;
  if (slots_ > 0) {
    record_mark();
    lane_->wait_for(marks_.back().id);
    marks_.clear();
    rows_.restart(0);
  }
  uploaded_ = 0;
}

int64_t PrefetchedData::skip_start(int64_t rand_skip) const {
  const int64_t skip =
      rand_skip > 0 ? int64_t(counter_hash(seed_, kSkipCounter) % uint64_t(rand_skip)) : 0;
  if (skip > 0) LOG(INFO) << where() << "skipping the first " << skip << " records";
  return skip;
}

void PrefetchedData::start() {
  const int threads = std::clamp(usable_cores(), 1, kMaxThreads);
  const int64_t first = position_ + rank_ * batch_;  // this worker's first row of batch 0
  prefetcher_ = std::make_unique<BatchPrefetcher>(
      buffers_, threads, batch_,
      [this, first](int64_t b, RawRecords& records) {
        source_->read(seed_, first + b * stride(), batch_, records);
      },
      [this, first](int64_t b, const RawRecords& records, int64_t begin, int64_t end,
                    HostBatch& out) {
        for (int64_t r = begin; r < end; ++r)
          source_->decode(seed_, first + b * stride() + r, records[size_t(r)],
                          out.data.data() + r * count_, out.label.data() + r);
      });
}

// The next batch of the stream into ring slot uploaded_ % slots_, on the lane, once the pass
// that last read the slot is done; the host does not wait for the copy (the prefetcher waits
// on the fence before it fills the buffer again). The caller joins the lane.
void PrefetchedData::upload_next() {
  if (!prefetcher_) start();
  HostBatch& batch = prefetcher_->take();
  wait_for_slot(uploaded_);
  const int64_t slot = uploaded_ % slots_;
  lane_->upload(batch.data.bytes(), batch.data.data(),
                ring_data_.as<float>() + slot * batch_ * count_);
  if (labels_)
    lane_->upload(batch.label.bytes(), batch.label.data(),
                  ring_label_.as<float>() + slot * batch_);
  batch.fence->record();
  prefetcher_->release();
  ++uploaded_;
}

// A mark after the gathers of the passes issued so far (rows_.passes()).
void PrefetchedData::record_mark() {
  const int64_t done = rows_.passes();
  if (!marks_.empty() && marks_.back().passes == done) return;
  if (int(marks_.size()) == kMarks) marks_.pop_front();  // its id is the one reused below
  marks_.push_back({done, next_mark_});
  lane_->mark(next_mark_);
  next_mark_ = (next_mark_ + 1) % kMarks;
}

// Makes the lane's next uploads, into pass `pass`'s slot, wait for the pass that last read
// that slot (pass - slots_; its gather was issued: at most half the ring is uploaded ahead):
// the oldest mark after it, so the uploads overlap the passes since.
void PrefetchedData::wait_for_slot(int64_t pass) {
  const int64_t reader = pass - slots_;
  if (reader < 0) return;  // the slot has not been read since the ring was made
  for (const Mark& m : marks_) {
    if (m.passes > reader) {
      lane_->wait_for(m.id);
      return;
    }
  }
  record_mark();  // no mark after the reader yet: wait for everything issued so far
  lane_->wait_for(marks_.back().id);
}

// A ring for replays of `passes` passes (2 x passes slots); its counter restarts. The two
// slots of single passes are always made; a ring for replays of several passes is not when
// it would be larger than kMaxRingBytes or hold more rows than BatchRows counts, or when the
// device has no room for it: then false (logged once), the old ring kept, and those replays
// run their passes directly.
bool PrefetchedData::shape_ring(int64_t passes) {
  const int64_t slots = 2 * passes;
  const size_t bytes = sizeof(float) * size_t(slots * batch_ * (count_ + 1));
  std::string refusal;
  if (passes > 1 && bytes > kMaxRingBytes)
    refusal = "would need " + readable_bytes(bytes) + " of device memory for their batches, "
              "more than " + readable_bytes(kMaxRingBytes);
  else if (passes > 1 && slots * batch_ > BatchRows::kMaxSamples)
    refusal = "would hold " + std::to_string(slots * batch_) + " rows, more than 2^24";
  Buffer data, label;
  if (refusal.empty()) {
    try {
      data = Buffer(backend_, sizeof(float) * size_t(slots * batch_ * count_));
      label = Buffer(backend_, sizeof(float) * size_t(slots * batch_));
    } catch (const Error& e) {
      if (passes == 1) throw;
      refusal = std::string("could not allocate their batches: ") + e.what();
    }
  }
  if (!refusal.empty()) {
    if (!ring_refused_)
      LOG(INFO) << where() << "replaying " << passes << " passes at once " << refusal
                << "; those passes run directly";
    ring_refused_ = true;
    return false;
  }
  ring_data_ = std::move(data);
  ring_label_ = std::move(label);
  rows_.shape(backend_, where(), slots * batch_, batch_);
  slots_ = slots;
  uploaded_ = 0;
  marks_.clear();
  return true;
}

void PrefetchedData::forward(const Tensors& /*bottom*/, const Tensors& top) {
  if (uploaded_ == rows_.passes()) {  // else prepare_replay uploaded it
    record_mark();
    upload_next();
    lane_->join();
  }
  rows_.next();
  rows_.gather(count_, ring_data_.as<float>(), top[0]->mutable_data());
  if (labels_) rows_.gather(1, ring_label_.as<float>(), top[1]->mutable_data());
  position_ += stride();
}

bool PrefetchedData::prepare_replay(int64_t passes) {
  // The ring grows only while it holds no batch a pass has yet to read.
  if (2 * passes > slots_ && (uploaded_ > rows_.passes() || !shape_ring(passes))) return false;
  if (!rows_.prepare_replay()) return false;
  record_mark();
  while (uploaded_ < rows_.passes() + passes) upload_next();
  lane_->join();
  return true;
}

void PrefetchedData::replayed(int64_t passes) {
  rows_.replayed(passes);
  position_ += passes * stride();
}

bool PrefetchedData::set_worker(int rank, int workers) {
  prefetcher_.reset();  // its threads read rank_ and workers_
  rank_ = rank;
  workers_ = workers;
  restart(position_);
  return true;
}

// (seed, position, records): the stream position of the next pass.
std::vector<int64_t> PrefetchedData::state() const {
  return {int64_t(seed_), position_, source_->records()};
}

void PrefetchedData::set_state(const std::vector<int64_t>& state) {
  LAMINA_REQUIRE(state.size() == 3, where(), "the snapshot holds ", state.size(),
                 " state values; ", param_.type(), " keeps 3 (seed, position, records)");
  LAMINA_REQUIRE(state[2] == source_->records(), source_->name(), ": the snapshot was taken "
                 "with ", state[2], " records, but the source holds ", source_->records(),
                 "; resume with the same data");
  LAMINA_REQUIRE(state[1] >= 0, where(), "the snapshot's position ", state[1],
                 " is impossible");
  prefetcher_.reset();  // its threads read seed_
  seed_ = uint64_t(state[0]);  // the transforms' draws depend on it
  restart(state[1]);
}

}  // namespace lamina
