// DummyData (Caffe's): tops filled by fillers, for testing nets and timing them.
//
//   layer { name: "dummy" type: "DummyData" top: "data" top: "label"
//           dummy_data_param { shape { dim: 32 dim: 3 dim: 28 dim: 28 } shape { dim: 32 }
//                              data_filler { type: "gaussian" std: 1 }
//                              data_filler { type: "constant" value: 0 } } }
//
// Shapes: one `shape` for every top or one per top, or Caffe's older num/channels/height/
// width (each given once or once per top; not with shape). Fillers: none (every top
// constant 0), one for every top, or one per top. As in Caffe, a top whose filler is
// constant is filled once, at setup; every other top is filled again at every forward pass.
//
// The fillers are Lamina's (filler.hpp), run on the host: a refilling top's values are drawn
// there each pass, from a generator seeded by the layer's seed and the pass number, and
// copied to the device. That copy is why a net with a refilling DummyData is not captured as
// a CUDA graph (capture_blocker): the backend has no operation that writes counter-based
// uniform or Gaussian values on the device (dropout_forward draws uniform numbers but writes
// only a keep mask), and the fillers that depend on the shape (xavier, msra, sparse
// gaussian, positive_unitball) would need more. Constant tops cost nothing per pass.
// State (snapshots): (seed, passes) when some top refills, so a resumed run draws the
// values an uninterrupted one would.
#include <random>

#include "lamina/filler.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class DummyDataLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"dummy_data_param"}; }
  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int max_tops() const override { return -1; }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const DummyDataParameter& p = param_.dummy_data_param();
    const int tops = int(top.size());
    const int fillers = p.data_filler_size();
    LAMINA_REQUIRE(fillers == 0 || fillers == 1 || fillers == tops, where(), "give "
                   "dummy_data_param.data_filler once for every top or once per top (",
                   tops, "), not ", fillers, " times");
    refills_.assign(tops, false);
    fillers_.assign(tops, FillerParameter());
    for (int i = 0; i < tops; ++i) {
      if (fillers == 0) {
        fillers_[i].set_type("constant");  // Caffe: no filler means zeros
        fillers_[i].set_value(0);
      } else {
        fillers_[i] = p.data_filler(fillers == 1 ? 0 : i);
      }
      refills_[i] = fillers_[i].type() != "constant";
      top[i]->reshape(top_shape(i, tops));
    }
    // Every top once: a constant one keeps its values; a bad filler fails here.
    std::mt19937_64 rng(pass_seed(uint64_t(-1)));
    for (int i = 0; i < tops; ++i) {
      try {
        fill(fillers_[i], top[i]->shape(), rng, values_);
      } catch (const Error& e) {
        fail(where(), "data_filler for top '", param_.top(i), "': ", e.what());
      }
      backend_.copy_from_host(sizeof(float) * values_.size(), values_.data(),
                              top[i]->mutable_data());
    }
    passes_ = 0;
  }

  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    if (!refilling()) return;
    std::mt19937_64 rng(pass_seed(uint64_t(passes_)));
    for (size_t i = 0; i < top.size(); ++i) {
      if (!refills_[i]) continue;
      fill(fillers_[i], top[i]->shape(), rng, values_);
      backend_.copy_from_host(sizeof(float) * values_.size(), values_.data(),
                              top[i]->mutable_data());
    }
    ++passes_;
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  std::optional<std::string> capture_blocker() const override {
    for (size_t i = 0; i < refills_.size(); ++i) {
      if (!refills_[i]) continue;
      return "DummyData fills top '" + param_.top(int(i)) +
             "' with its " + fillers_[i].type() + " filler on the host and copies it to the "
             "device every pass (the backend has no operation drawing such values on the "
             "device); constant fillers are filled once and can be captured";
    }
    return std::string();
  }

  // (seed, passes) while some top refills, else nothing.
  std::vector<int64_t> state() const override {
    if (!refilling()) return {};
    return {int64_t(seed_), passes_};
  }
  void set_state(const std::vector<int64_t>& state) override {
    if (!refilling()) return Layer::set_state(state);
    LAMINA_REQUIRE(state.size() == 2 && state[1] >= 0, where(), "the snapshot holds ",
                   state.size(), " state values; DummyData keeps 2 (seed, passes >= 0)");
    seed_ = uint64_t(state[0]);
    passes_ = state[1];
  }

 private:
  bool refilling() const {
    for (bool r : refills_)
      if (r) return true;
    return false;
  }

  // Top i's shape: shape (once or per top), or num/channels/height/width.
  Shape top_shape(int i, int tops) const {
    const DummyDataParameter& p = param_.dummy_data_param();
    const bool legacy = p.num_size() > 0 || p.channels_size() > 0 || p.height_size() > 0 ||
                        p.width_size() > 0;
    if (!legacy) {
      LAMINA_REQUIRE(p.shape_size() == 1 || p.shape_size() == tops, where(), "give "
                     "dummy_data_param.shape once for every top or once per top (", tops,
                     "), not ", p.shape_size(), " times");
      const BlobShape& s = p.shape(p.shape_size() == 1 ? 0 : i);
      Shape shape(s.dim().begin(), s.dim().end());
      for (int64_t d : shape)
        LAMINA_REQUIRE(d >= 0, where(), "dummy_data_param.shape has dimension ", d,
                       "; dimensions are >= 0");
      return shape;
    }
    LAMINA_REQUIRE(p.shape_size() == 0, where(), "dummy_data_param gives both shape and "
                   "num/channels/height/width; use one or the other");
    Shape shape;
    const auto pick = [&](const google::protobuf::RepeatedField<uint32_t>& field,
                          const char* field_name) {
      LAMINA_REQUIRE(field.size() == 1 || field.size() == tops, where(), "give "
                     "dummy_data_param.", field_name, " once for every top or once per top (",
                     tops, "), not ", field.size(), " times");
      shape.push_back(field.Get(field.size() == 1 ? 0 : i));
    };
    pick(p.num(), "num");
    pick(p.channels(), "channels");
    pick(p.height(), "height");
    pick(p.width(), "width");
    return shape;
  }

  // The generator's seed for a pass (setup's is pass -1).
  uint64_t pass_seed(uint64_t pass) const {
    std::seed_seq seq{uint32_t(seed_), uint32_t(seed_ >> 32), uint32_t(pass),
                      uint32_t(pass >> 32)};
    return std::mt19937_64(seq)();
  }

  std::vector<FillerParameter> fillers_;  // one per top
  std::vector<bool> refills_;             // per top: filled again every pass
  std::vector<float> values_;             // host staging for one top
  int64_t passes_ = 0;                    // forward passes since setup
};

}  // namespace

void register_dummy_data_layer() { register_layer<DummyDataLayer>("DummyData"); }

}  // namespace lamina
