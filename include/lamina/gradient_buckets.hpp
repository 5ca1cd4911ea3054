// GradientBuckets: the gradient all-reduce of a data-parallel job, in buckets issued while
// the backward pass runs (docs/distributed.md).
//
// A bucket is a contiguous range of the parameter arena. The arena lays parameters out in
// the order their first layer comes in the net, and backward runs the layers in reverse, so
// the gradients become final from the end of the arena towards its start: a parameter's
// gradient is final once the first layer that uses it (shared parameters have several) has
// issued its parameter gradients; the bucket's all-reduce then runs beside that layer's
// input gradients and the layers below. The buckets are planned from the end of the arena,
// each closed when it holds at least bucket_bytes of parameters, and one is issued as soon
// as its earliest layer is done. Every worker plans the same buckets from the same net, so
// every worker issues the same all-reduces in the same order.
//
// With a communicator that reduces beside the backend (NCCL) the buckets run on a stream of
// their own while backward goes on, and finish() makes the update wait for them, or
// finish_each() lets each bucket's part of the update wait for that bucket's sum only (in
// stream order: no host wait, and a captured step holds them). Otherwise (MPI, whose all-reduce
// waits) there is one bucket over the whole arena, summed in finish(). An arena of at most
// bucket_bytes is one bucket either way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lamina {

class Communicator;
class Net;

struct GradientBucket {
  int64_t offset = 0;  // floats from the start of the arena
  int64_t count = 0;   // floats, padding between parameters included
  int first_layer = -1;  // issued after this layer's backward; -1: in finish()
  int params = 0;        // how many parameters it holds
};

class GradientBuckets {
 public:
  GradientBuckets(Net& net, Communicator& comm, double bucket_bytes);

  // The backward pass whose gradients are complete (the last of iter_size): start() before
  // it, params_done(i) once layer i has issued its parameter gradients (Net::backward's
  // callback: every layer, in the order backward runs them), finish() after it. finish()
  // issues the buckets not yet issued and makes later backend operations wait for all.
  void start();
  void params_done(int layer);
  void finish();
  // Or, instead of finish(): issue_rest() issues the buckets not yet issued, and then
  // finish_each(summed) calls summed(bucket) for each bucket in the order they were issued,
  // with the backend operations it issues waiting for that bucket's sum only (and the
  // operations before it), then makes later operations wait for all. The solver updates
  // each bucket's parameters so, the big buckets' while the last one's sum runs.
  void issue_rest();
  void finish_each(const std::function<void(const GradientBucket&)>& summed);
  // Whether the buckets are summed beside the backward pass.
  bool beside() const { return !buckets_.empty() && buckets_.front().first_layer >= 0; }

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // "2 all-reduces per iteration (67.3 and 12.9 MB) beside the backward pass", for the log.
  std::string summary() const;

 private:
  void issue(const GradientBucket& bucket);

  Net& net_;
  Communicator& comm_;
  std::vector<GradientBucket> buckets_;  // in the order they are issued
  size_t next_ = 0;                      // the first bucket not issued in this pass
};

}  // namespace lamina
