// debug_info (net.hpp): Caffe's per-layer log lines, in Caffe's words, so that logs of the
// two can be compared line by line:
//     [Forward] Layer conv1, top blob conv1 data: 0.0123
//     [Forward] Layer conv1, param blob 0 data: 0.0456        (its param { name } if given)
//     [Backward] Layer conv1, bottom blob data diff: 0.0001   (the gradients it computes)
//     [Backward] Layer conv1, param blob 0 diff: 0.0002
//     [Backward] All net params (data, diff): L1 norm = (a, b); L2 norm = (c, d)
// Each value is the mean absolute value (Caffe's asum / count), read back to the host.
#include <glog/logging.h>

#include <cmath>

#include "lamina/net.hpp"

namespace lamina {
namespace {

double mean_abs(const std::vector<float>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (float v : values) sum += std::abs(double(v));
  return sum / double(values.size());
}

}  // namespace

void Net::log_forward(int i) const {
  const Layer& layer = *layers_[i];
  for (int t : io_[i].tops) {
    LOG(INFO) << "    [Forward] Layer " << layer.name() << ", top blob " << blobs_[t]->name()
              << " data: " << mean_abs(blobs_[t]->copy_data_to_host());
  }
  for (size_t k = 0; k < layer.params().size(); ++k) {
    const LayerParameter& p = layer.param();
    const std::string shown = int(k) < p.param_size() && !p.param(k).name().empty()
                                  ? p.param(k).name()
                                  : std::to_string(k);
    LOG(INFO) << "    [Forward] Layer " << layer.name() << ", param blob " << shown
              << " data: " << mean_abs(layer.params()[k].tensor->copy_data_to_host());
  }
}

void Net::log_backward(int i) const {
  if (!needs_backward_[i] || fused_[i]) return;
  const Layer& layer = *layers_[i];
  for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
    if (!propagate_[i][j]) continue;
    const Tensor& bottom = *blobs_[io_[i].bottoms[j]];
    LOG(INFO) << "    [Backward] Layer " << layer.name() << ", bottom blob " << bottom.name()
              << " diff: " << mean_abs(bottom.copy_diff_to_host());
  }
  if (!learnable_[i]) return;
  for (size_t k = 0; k < layer.params().size(); ++k) {
    LOG(INFO) << "    [Backward] Layer " << layer.name() << ", param blob " << k
              << " diff: " << mean_abs(layer.params()[k].tensor->copy_diff_to_host());
  }
}

void Net::log_parameter_norms() const {
  if (arena_->count() == 0) return;
  // Each parameter once (a shared one has one entry); the padding between them is zero.
  double l1[2] = {0, 0}, l2[2] = {0, 0};
  const float* arrays[2] = {arena_->data(), arena_->diff()};
  for (int a = 0; a < 2; ++a) {
    for (float v : arena_->to_host(arrays[a])) {
      l1[a] += std::abs(double(v));
      l2[a] += double(v) * double(v);
    }
  }
  LOG(INFO) << "    [Backward] All net params (data, diff): L1 norm = (" << l1[0] << ", "
            << l1[1] << "); L2 norm = (" << std::sqrt(l2[0]) << ", " << std::sqrt(l2[1]) << ")";
}

}  // namespace lamina
