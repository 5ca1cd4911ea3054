// Caffe's element-wise ("neuron") layers, one family over the backend's pointwise functions
// (backend.hpp's Pointwise, kPointwise; formulas in pointwise_math.hpp):
//   AbsVal     y = |x|                                 dx = sign(x) dy, sign(0) = 0
//   BNLL       y = log(1 + exp(x))                     dx = dy e / (e + 1), e = exp(min(x, 50))
//   Power      y = (shift + scale x)^power             (power_param)
//   Exp        y = base^(shift + scale x)              (exp_param; base -1 means e)
//   Log        y = log_base(shift + scale x)           (log_param; base -1 means e)
//   Threshold  y = x > threshold ? 1 : 0               dx = 0 (threshold_param)
//   Clip       y = min(max(x, min), max)               dx = dy where min <= x <= max
//   Swish      y = x sigmoid(beta x)                   (swish_param)
//   ELU        y = x > 0 ? x : alpha (exp(x) - 1)      dx = dy (y + alpha) for x <= 0
// top has the bottom's shape; bottom diffs are written with =. The layer turns its
// parameters into the function's constants as Caffe does (Exp: ln(base) scale and
// base^shift; Log: 1 / ln(base)).
// In place (top == bottom) they work as Caffe's do: a layer whose gradient needs x keeps a
// copy of it (an array of the bottom's count, filled by forward); Exp's gradient is its
// output (it reads the top); Threshold and a Power whose gradient is constant read neither.
#include <cmath>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

// The parameter message of F's layer, or null.
constexpr const char* message_of(PointwiseFn f) {
  switch (f) {
    case PointwiseFn::kPower: return "power_param";
    case PointwiseFn::kExp: return "exp_param";
    case PointwiseFn::kLog: return "log_param";
    case PointwiseFn::kThreshold: return "threshold_param";
    case PointwiseFn::kClip: return "clip_param";
    case PointwiseFn::kSwish: return "swish_param";
    case PointwiseFn::kELU: return "elu_param";
    default: return nullptr;
  }
}

template <PointwiseFn F>
class PointwiseLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override {
    if (message_of(F) == nullptr) return {};
    return {message_of(F)};
  }
  std::vector<Operation> operations() const override { return {Operation::kPointwise}; }
  bool supports_in_place() const override { return true; }
  TopUse backward_reads_top() const override {
    return F == PointwiseFn::kExp ? TopUse::kValues : TopUse::kNothing;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    f_ = function();
    const Tensor& x = *bottom[0];
    in_place_ = top[0] == bottom[0];
    keeps_input_ = in_place_ && gradient_reads_x();
    if (keeps_input_) input_.reserve(backend_, sizeof(float) * x.count());
    if (!in_place_) top[0]->reshape(x.shape());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    if (keeps_input_) backend_.copy(sizeof(float) * x.count(), x.data(), input_.as<float>());
    backend_.pointwise_forward(f_, x.count(), x.data(), top[0]->mutable_data());
  }

  // x is the kept copy in place (or, where the gradient does not read it, the top).
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* x = keeps_input_ ? input_.as<float>() : bottom[0]->data();
    backend_.pointwise_backward(f_, top[0]->count(), x, top[0]->data(), top[0]->diff(),
                                bottom[0]->mutable_diff());
  }

 private:
  // The function's constants from the layer's parameters, checked.
  Pointwise function() const {
    Pointwise f{F};
    if constexpr (F == PointwiseFn::kPower) {
      const PowerParameter& p = param_.power_param();
      f.a = p.power(), f.b = p.scale(), f.c = p.shift();
    } else if constexpr (F == PointwiseFn::kExp) {
      const ExpParameter& p = param_.exp_param();
      const float base = p.base(), log_base = natural_log("exp_param", base);
      f.a = log_base * p.scale();  // base^(scale x) = exp(ln(base) scale x)
      const float shift = p.shift();
      f.b = shift == 0 ? 1.0f : (base == -1 ? std::exp(shift) : std::pow(base, shift));
    } else if constexpr (F == PointwiseFn::kLog) {
      const LogParameter& p = param_.log_param();
      const float log_base = natural_log("log_param", p.base());
      LAMINA_REQUIRE(log_base != 0, where(), "log_param.base must not be 1 (logarithms to base "
                     "1 do not exist); use -1 for e");
      f.a = p.scale(), f.b = p.shift(), f.c = 1.0f / log_base;
    } else if constexpr (F == PointwiseFn::kThreshold) {
      f.a = param_.threshold_param().threshold();
    } else if constexpr (F == PointwiseFn::kClip) {
      const ClipParameter& p = param_.clip_param();
      LAMINA_REQUIRE(p.has_min() && p.has_max(), where(), "clip_param needs both min and max");
      LAMINA_REQUIRE(p.min() <= p.max(), where(), "clip_param.min (", p.min(),
                     ") must not exceed clip_param.max (", p.max(), ")");
      f.a = p.min(), f.b = p.max();
    } else if constexpr (F == PointwiseFn::kSwish) {
      f.a = param_.swish_param().beta();
    } else if constexpr (F == PointwiseFn::kELU) {
      f.a = param_.elu_param().alpha();
    }
    return f;
  }

  // ln(base) for Exp's and Log's base: 1 for -1 (e), else base must be positive (and finite).
  float natural_log(const char* message, float base) const {
    if (base == -1) return 1.0f;
    LAMINA_REQUIRE(base > 0 && std::isfinite(base), where(), message, ".base must be positive, "
                   "or -1 for e; got ", base);
    return std::log(base);
  }

  // Whether the gradient reads x (kept in place): all but Exp (its output), Threshold (0) and
  // a Power whose gradient is constant (power or scale 0, or power 1).
  bool gradient_reads_x() const {
    if (F == PointwiseFn::kExp || F == PointwiseFn::kThreshold) return false;
    if (F == PointwiseFn::kPower) return f_.a * f_.b != 0 && f_.a != 1;
    return true;
  }

  Pointwise f_{F};
  bool in_place_ = false;
  bool keeps_input_ = false;  // in place, where the gradient reads x
  Buffer input_;              // (x's count) floats where keeps_input_: x as forward saw it
};

}  // namespace

void register_pointwise_layers() {
  register_layer<PointwiseLayer<PointwiseFn::kAbsVal>>("AbsVal");
  register_layer<PointwiseLayer<PointwiseFn::kBNLL>>("BNLL");
  register_layer<PointwiseLayer<PointwiseFn::kPower>>("Power");
  register_layer<PointwiseLayer<PointwiseFn::kExp>>("Exp");
  register_layer<PointwiseLayer<PointwiseFn::kLog>>("Log");
  register_layer<PointwiseLayer<PointwiseFn::kThreshold>>("Threshold");
  register_layer<PointwiseLayer<PointwiseFn::kClip>>("Clip");
  register_layer<PointwiseLayer<PointwiseFn::kSwish>>("Swish");
  register_layer<PointwiseLayer<PointwiseFn::kELU>>("ELU");
}

}  // namespace lamina
