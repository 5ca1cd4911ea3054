// The gradient all-reduce in buckets beside the backward pass; gradient_buckets.hpp has the
// rules.
#include "lamina/gradient_buckets.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "lamina/communicator.hpp"
#include "lamina/net.hpp"

namespace lamina {

GradientBuckets::GradientBuckets(Net& net, Communicator& comm, double bucket_bytes)
    : net_(net), comm_(comm) {
  const ParamArena& arena = net.arena();
  if (arena.count() == 0) return;
  const double arena_bytes = double(arena.count()) * sizeof(float);
  if (!comm.reduces_beside() || arena_bytes <= bucket_bytes) {
    buckets_.push_back({0, arena.count(), -1, int(arena.table().size())});
    return;
  }
  // The layer whose backward computes each layer's gradients: itself, or the last one before
  // it that is not absorbed, which absorbed it (Layer::absorb).
  std::map<std::string, int> layer_index;
  for (int i = 0, runs = 0; i < net.num_layers(); ++i) {
    if (!net.layer_fused(i)) runs = i;
    layer_index.emplace(net.layer_key(i), runs);
  }
  const std::vector<ParamInfo>& table = arena.table();
  GradientBucket open{0, 0, net.num_layers(), 0};
  int64_t end = arena.count();  // the open bucket's end
  for (size_t k = table.size(); k-- > 0;) {
    const ParamInfo& info = table[k];
    open.first_layer = std::min(open.first_layer, layer_index.at(info.layer));
    ++open.params;
    if (double(end - info.offset) * sizeof(float) >= bucket_bytes || k == 0) {
      open.offset = k == 0 ? 0 : info.offset;
      open.count = end - open.offset;
      buckets_.push_back(open);
      end = open.offset;
      open = GradientBucket{0, 0, net.num_layers(), 0};
    }
  }
  comm.prepare_beside(int(buckets_.size()));
}

void GradientBuckets::issue(const GradientBucket& bucket) {
  float* diff = net_.arena().diff() + bucket.offset;
  if (bucket.first_layer < 0)
    comm_.all_reduce_sum(diff, bucket.count);  // after backward, in stream order
  else
    comm_.all_reduce_sum_beside(diff, bucket.count);
}

void GradientBuckets::start() {
  next_ = 0;
  if (beside()) comm_.start_beside();
}

void GradientBuckets::params_done(int layer) {
  while (next_ < buckets_.size() && buckets_[next_].first_layer >= layer)
    issue(buckets_[next_++]);
}

void GradientBuckets::finish() {
  issue_rest();
  comm_.join_beside();
}

void GradientBuckets::issue_rest() {
  while (next_ < buckets_.size()) issue(buckets_[next_++]);
}

void GradientBuckets::finish_each(const std::function<void(const GradientBucket&)>& summed) {
  issue_rest();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (beside()) comm_.wait_beside(int(k));
    summed(buckets_[k]);
  }
  comm_.join_beside();
}

std::string GradientBuckets::summary() const {
  if (buckets_.empty()) return "no all-reduce (the net has no learnable parameters)";
  std::string sizes;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    char mb[32];
    std::snprintf(mb, sizeof(mb), "%.3g", double(buckets_[i].count) * sizeof(float) / 1e6);
    sizes += (i == 0 ? "" : i + 1 == buckets_.size() ? " and " : ", ") + std::string(mb);
  }
  return std::to_string(buckets_.size()) + " all-reduce" + (buckets_.size() == 1 ? "" : "s") +
         " per iteration (" + sizes + " MB) " +
         (beside() ? "beside the backward pass" : "after the backward pass");
}

}  // namespace lamina
