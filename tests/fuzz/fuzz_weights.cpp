// Fuzz target: bytes -> a weights file -> load_weights into a small net, in each matching
// mode (exact, require-all, fine-tune); and the raw bytes through decode_snapshot.
//
// Every malformed file must end in a lamina::Error that leaves the net's weights as they
// were ("an error leaves the net untouched", snapshot.hpp); anything else is a bug. The net
// has a shared parameter and a Sequential container, so names like "mlp/ip3/weight" and
// "shared" are in play. Seeds: LAMINA_FUZZ_WRITE_SEEDS=DIR writes the net's own weights file.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_loading.hpp"
#include "fuzz_util.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/snapshot.hpp"

namespace lamina::fuzz {
namespace {

constexpr const char* kNet = R"(
name: "fuzz_weights"
layer { name: "data" type: "Input" top: "x" top: "label"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer {
  name: "mlp" type: "Sequential" bottom: "x" top: "scores"
  layer { name: "ip1" type: "Linear" param { name: "shared" }
          inner_product_param { num_output: 3 bias_term: false } }
  layer { name: "relu" type: "ReLU" }
  layer { name: "ip2" type: "Linear" param { name: "shared" }
          inner_product_param { num_output: 3 bias_term: false } }
  layer { name: "ip3" type: "Linear" inner_product_param { num_output: 4 } }
}
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" }
)";

struct Fixture {
  NativeBackend backend;
  std::unique_ptr<Net> net;
  std::vector<float> initial;  // the arena as filled
};

Fixture& fixture() {
  static const std::unique_ptr<Fixture> f = [] {
    quiet_logging();
    auto fx = std::make_unique<Fixture>();
    fx->net = std::make_unique<Net>(parse_net_parameter(kNet, "fuzz_weights"), TRAIN,
                                    fx->backend, 3);
    const float* w = fx->net->arena().data();
    fx->initial.assign(w, w + fx->net->arena().count());
    const std::string seed = (scratch_dir() / "seed.lamina").string();
    save_weights(*fx->net, seed);
    write_seed("seed-weights.lamina", read_text_file(seed));
    return fx;
  }();
  return *f;
}

void run(const uint8_t* data, size_t size) {
  Fixture& fx = fixture();
  Net& net = *fx.net;
  const std::string raw(reinterpret_cast<const char*>(data), size);
  try {
    (void)decode_snapshot(raw, SnapshotKind::kWeights, "fuzz (raw)", false);
    accepted("decode_snapshot");
  } catch (const Error& e) {
    rejected("decode_snapshot", e);
  }

  const std::string bytes = with_valid_crc(data, size);
  const std::string path = write_file("input.lamina", bytes.data(), bytes.size());
  load_in_every_mode(net, "load_weights", fx.initial,
                     [&](WeightsMatch match) { (void)load_weights(net, path, match); });
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
