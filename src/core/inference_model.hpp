// What a Model holds and its predictors share (inference.hpp): the deploy net, the backend
// whose memory holds the weights, the weights' arena; and the per-device lock that GPU
// calls hold.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/common.hpp"
#include "lamina/param_arena.hpp"
#include "lamina/lamina.pb.h"

namespace lamina::inference_detail {

// The lock of the device a spec names, held by every inference call that reaches the device
// (a CUDA device's context serves one host thread at a time). CPU work takes none: the
// returned lock then owns no mutex.
std::unique_lock<std::mutex> device_lock(const BackendSpec& spec);

// The deploy net with the first dimension of every input set to batch (> 0): the shapes of
// its Input layers, and of Caffe's input header, which becomes an Input layer here as it
// does when a net is built (net_state.hpp). An input without dimensions is an Error.
NetParameter with_batch(const NetParameter& deploy, int64_t batch, const std::string& source);

struct ModelState {
  ModelState() = default;
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;
  ~ModelState();  // releases the weights under the device's lock

  BackendSpec spec;
  std::string device;  // spec.str()
  NetParameter deploy;
  std::string source;  // the deploy file, for messages
  std::string name;    // the net's
  std::vector<std::string> inputs, outputs;
  std::vector<Shape> input_shapes;  // per input, as the deploy file gives them
  std::unique_ptr<Backend> backend;   // the weights' memory (declared before the arena,
  std::shared_ptr<ParamArena> arena;  // which refers to it)
};

}  // namespace lamina::inference_detail
