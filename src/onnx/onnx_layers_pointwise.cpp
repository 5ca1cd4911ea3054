// ONNX for the element-wise layers: ReLU (Relu, LeakyRelu), Sigmoid, TanH, AbsVal (Abs),
// BNLL (Softplus), ELU (Elu), PReLU (PRelu), Clip, Threshold (Greater, Cast), Swish
// (x Sigmoid(beta x)), Power, Exp and Log (their affine maps around Pow, Exp, Log, with
// Caffe's constants as pointwise.cpp computes them), Eltwise (Sum of the weighted bottoms,
// Mul, Max), and the identities of a deploy net: Dropout (inverted: TEST passes x through)
// and Convert (a storage change; the exported graph is FP32).
#include <cmath>

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

// Applies op(v, constant) unless the constant is op's identity; returns the result.
std::string apply(LayerNodes& l, const char* op, const std::string& v, float c, float neutral,
                  const std::string& step) {
  if (c == neutral) return v;
  return l.graph.step(op, {v, l.graph.scalar(l.part(step), c)}, l.part(step));
}

// Ends a chain of steps: renames its last value to the layer's top (an Identity when the
// chain made no node, as for Power 1 with scale 1 and shift 0).
void finish(LayerNodes& l, const std::string& v) {
  onnx::GraphProto& g = l.graph.proto();
  if (v != l.in[0] && g.node_size() > 0 && g.node(g.node_size() - 1).output(0) == v) {
    onnx::NodeProto& last = *g.mutable_node(g.node_size() - 1);
    last.set_output(0, l.out[0]);
    last.set_name(l.name());
    return;
  }
  identity(l);
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
  std::string v = apply(l, "Mul", l.in[0], p.scale(), 1, "scale");
  v = apply(l, "Add", v, p.shift(), 0, "shift");
  finish(l, apply(l, "Pow", v, p.power(), 1, "power"));
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
  const std::string e = l.graph.step("Exp", {apply(l, "Mul", l.in[0], inner, 1, "scale")},
                                     l.part("exp"));
  finish(l, apply(l, "Mul", e, outer, 1, "base_shift"));
}

// y = log(shift + scale x) / ln(base)
void log(LayerNodes& l) {
  const LogParameter& p = l.param().log_param();
  std::string v = apply(l, "Mul", l.in[0], p.scale(), 1, "scale");
  v = l.graph.step("Log", {apply(l, "Add", v, p.shift(), 0, "shift")}, l.part("log"));
  finish(l, apply(l, "Mul", v, 1.0f / natural_log(p.base()), 1, "base"));
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
    terms.push_back(apply(l, "Mul", l.in[i], c, 1, "coeff" + std::to_string(i)));
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
