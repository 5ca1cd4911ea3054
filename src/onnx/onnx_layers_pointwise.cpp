// ONNX for the element-wise layers: ReLU (Relu, LeakyRelu), Sigmoid, TanH, AbsVal (Abs),
// BNLL (Softplus), ELU (Elu), PReLU (PRelu), Clip, Threshold (Greater, Cast), Swish
// (x Sigmoid(beta x)), Power, Exp and Log (their affine maps around Pow, Exp, Log, with
// Caffe's constants as pointwise.cpp computes them), Eltwise (Sum of the weighted bottoms,
// Mul, Max), and the identities of a deploy net: Dropout (inverted: TEST passes x through)
// and Convert (a storage change; the exported graph is FP32).
#include <cmath>
#include <optional>

#include "onnx_graph.hpp"

namespace lamina {
namespace {

void unary(LayerNodes& l, const char* op) { l.graph.node(op, {l.in[0]}, {l.out[0]}, l.name()); }

void relu(LayerNodes& l) {
  const float slope = l.param().relu_param().negative_slope();
  if (slope == 0) return unary(l, "Relu");
  set_attr(l.graph.node("LeakyRelu", {l.in[0]}, {l.out[0]}, l.name()), "alpha", slope);
}

void sigmoid(LayerNodes& l) { unary(l, "Sigmoid"); }
void tanh(LayerNodes& l) { unary(l, "Tanh"); }
void absval(LayerNodes& l) { unary(l, "Abs"); }
void bnll(LayerNodes& l) { unary(l, "Softplus"); }  // log(1 + e^x)
void identity(LayerNodes& l) { unary(l, "Identity"); }

void elu(LayerNodes& l) {
  set_attr(l.graph.node("Elu", {l.in[0]}, {l.out[0]}, l.name()), "alpha",
           l.param().elu_param().alpha());
}

// slope (C) over x (N, C, ...) as (C, 1, ...); channel_shared: one slope, (1).
void prelu(LayerNodes& l) {
  const Shape& xs = l.bottom[0];
  const Shape slope = l.param().prelu_param().channel_shared()
                          ? Shape{1}
                          : with_trailing_ones(l.param_shape(0), int(xs.size()) - 2);
  l.graph.node("PRelu", {l.in[0], l.weight(0, slope)}, {l.out[0]}, l.name());
}

void clip(LayerNodes& l) {
  const ClipParameter& p = l.param().clip_param();
  l.graph.node("Clip", {l.in[0], l.graph.scalar(l.part("min"), p.min()),
                        l.graph.scalar(l.part("max"), p.max())},
               {l.out[0]}, l.name());
}

// y = x > threshold ? 1 : 0
void threshold(LayerNodes& l) {
  const std::string t = l.graph.scalar(l.part("threshold"), l.param().threshold_param().threshold());
  const std::string above = l.graph.step("Greater", {l.in[0], t}, l.part("above"));
  set_attr(l.graph.node("Cast", {above}, {l.out[0]}, l.name()), "to",
           int64_t{onnx::TensorProto::FLOAT});
}

// y = x sigmoid(beta x)
void swish(LayerNodes& l) {
  const float beta = l.param().swish_param().beta();
  std::string z = l.in[0];
  if (beta != 1) z = l.graph.step("Mul", {z, l.graph.scalar(l.part("beta"), beta)}, l.part("beta"));
  const std::string gate = l.graph.step("Sigmoid", {z}, l.part("sigmoid"));
  l.graph.node("Mul", {l.in[0], gate}, {l.out[0]}, l.name());
}

// One step of an element-wise chain: op(v), or op(v, constant).
struct Step {
  const char* op;
  std::string name;
  std::optional<float> constant;
};

// The step op(v, c), or none where c is op's neutral element (scale 1, shift 0, power 1).
std::vector<Step> unless_neutral(const char* op, const std::string& name, float c,
                                 float neutral) {
  if (c == neutral) return {};
  return {Step{op, name, c}};
}

// Chains the steps from the bottom to the top: the last one writes the top and is named
// after the layer; with no step at all, an Identity.
void chain(LayerNodes& l, const std::vector<std::vector<Step>>& groups) {
  std::vector<Step> steps;
  for (const std::vector<Step>& g : groups) steps.insert(steps.end(), g.begin(), g.end());
  if (steps.empty()) return identity(l);
  std::string v = l.in[0];
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const bool last = i + 1 == steps.size();
    std::vector<std::string> inputs{v};
    if (s.constant) inputs.push_back(l.graph.scalar(l.part(s.name), *s.constant));
    const std::string out = last ? l.out[0] : l.graph.fresh(l.part(s.name));
    l.graph.node(s.op, inputs, {out}, last ? l.name() : l.part(s.name));
    v = out;
  }
}

// y = (shift + scale x)^power; with power or scale 0 the constant 1 (power 0) or
// shift^power, whatever x (Caffe's), expanded to the top's shape.
void power(LayerNodes& l) {
  const PowerParameter& p = l.param().power_param();
  if (p.power() * p.scale() == 0) {
    const float c = p.power() == 0 ? 1.0f : std::pow(p.shift(), p.power());
    l.graph.node("Expand", {l.graph.scalar(l.part("constant"), c),
                            l.graph.int64s(l.part("shape"), l.top[0])},
                 {l.out[0]}, l.name());
    return;
  }
  chain(l, {unless_neutral("Mul", "scale", p.scale(), 1),
            unless_neutral("Add", "shift", p.shift(), 0),
            unless_neutral("Pow", "power", p.power(), 1)});
}

// ln(base), base -1 meaning e.
float natural_log(float base) { return base == -1 ? 1.0f : std::log(base); }

// y = base^(shift + scale x) = base^shift exp(ln(base) scale x)
void exp(LayerNodes& l) {
  const ExpParameter& p = l.param().exp_param();
  const float inner = natural_log(p.base()) * p.scale();
  const float outer = p.shift() == 0 ? 1.0f
                      : p.base() == -1 ? std::exp(p.shift())
                                       : std::pow(p.base(), p.shift());
  chain(l, {unless_neutral("Mul", "scale", inner, 1), {Step{"Exp", "exp", {}}},
            unless_neutral("Mul", "base_shift", outer, 1)});
}

// y = log(shift + scale x) / ln(base)
void log(LayerNodes& l) {
  const LogParameter& p = l.param().log_param();
  chain(l, {unless_neutral("Mul", "scale", p.scale(), 1),
            unless_neutral("Add", "shift", p.shift(), 0), {Step{"Log", "log", {}}},
            unless_neutral("Mul", "base", 1.0f / natural_log(p.base()), 1)});
}

// SUM: the sum of coeff_i x_i; PROD: the product; MAX: the element-wise maximum (Caffe
// ignores coefficients there).
void eltwise(LayerNodes& l) {
  const EltwiseParameter& p = l.param().eltwise_param();
  if (p.operation() == EltwiseParameter::MAX) {
    l.graph.node("Max", l.in, {l.out[0]}, l.name());
    return;
  }
  if (p.operation() == EltwiseParameter::PROD) {
    std::string v = l.in[0];
    for (size_t i = 1; i + 1 < l.in.size(); ++i)
      v = l.graph.step("Mul", {v, l.in[i]}, l.part("product" + std::to_string(i)));
    l.graph.node("Mul", {v, l.in.back()}, {l.out[0]}, l.name());
    return;
  }
  std::vector<std::string> terms;
  for (size_t i = 0; i < l.in.size(); ++i) {
    const float c = p.coeff_size() > 0 ? p.coeff(int(i)) : 1.0f;
    const std::string step = "coeff" + std::to_string(i);
    terms.push_back(c == 1 ? l.in[i]
                           : l.graph.step("Mul", {l.in[i], l.graph.scalar(l.part(step), c)},
                                          l.part(step)));
  }
  l.graph.node("Sum", terms, {l.out[0]}, l.name());
}

}  // namespace

void add_pointwise_translators(std::map<std::string, LayerTranslator>& table) {
  table["ReLU"] = relu;
  table["Sigmoid"] = sigmoid;
  table["TanH"] = tanh;
  table["AbsVal"] = absval;
  table["BNLL"] = bnll;
  table["ELU"] = elu;
  table["PReLU"] = prelu;
  table["Clip"] = clip;
  table["Threshold"] = threshold;
  table["Swish"] = swish;
  table["Power"] = power;
  table["Exp"] = exp;
  table["Log"] = log;
  table["Eltwise"] = eltwise;
  table["Dropout"] = identity;
  table["Convert"] = identity;
}

}  // namespace lamina
