#!/usr/bin/env python3
"""An evaluator of exported ONNX graphs written with NumPy alone, independent of Lamina and
of any ONNX runtime: each operator the exporter emits, implemented from the ONNX operator
specification (opset 17), in float64.

Usage: onnx_numpy_eval.py [--tolerance T] CASE_DIR...

Each CASE_DIR holds model.onnx and test_data_set_0/input_<i>.pb, output_<i>.pb (ONNX's
test-data layout: serialized TensorProtos, in the order of the graph's inputs and outputs),
the outputs being Lamina's forward pass. For each case the model goes through ONNX's checker
with full_check (strict shape inference), then through this evaluator, and every output is
compared with Lamina's: the case passes when the largest absolute difference is at most the
tolerance (default 1e-5). Prints one line per case; exits 1 when any case fails.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


# ---- windows (Conv, ConvTranspose, pooling) ----

def out_size(n, k, s, d, pb, pe):
    return (n + pb + pe - (d * (k - 1) + 1)) // s + 1


def window_slices(oh, ow, s, d, i, j):
    """The cells of the padded input that kernel offset (i, j) reads for every output."""
    return (slice(i * d[0], i * d[0] + s[0] * (oh - 1) + 1, s[0]),
            slice(j * d[1], j * d[1] + s[1] * (ow - 1) + 1, s[1]))


def conv(x, w, b=None, group=1, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
         kernel_shape=None):
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = out_size(h, kh, strides[0], dilations[0], pads[0], pads[2])
    ow = out_size(wd, kw, strides[1], dilations[1], pads[1], pads[3])
    y = np.zeros((n, k, oh, ow))
    kg = k // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                rows, cols = window_slices(oh, ow, strides, dilations, i, j)
                y[:, g * kg:(g + 1) * kg] += np.einsum(
                    'nchw,kc->nkhw', xs[:, :, rows, cols], w[g * kg:(g + 1) * kg, :, i, j])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def conv_transpose(x, w, b=None, group=1, strides=(1, 1), pads=(0, 0, 0, 0),
                   dilations=(1, 1), kernel_shape=None):
    n, c, h, wd = x.shape
    _, kg, kh, kw = w.shape
    cg = c // group
    fh = strides[0] * (h - 1) + dilations[0] * (kh - 1) + 1
    fw = strides[1] * (wd - 1) + dilations[1] * (kw - 1) + 1
    full = np.zeros((n, kg * group, fh, fw))
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                rows, cols = window_slices(h, wd, strides, dilations, i, j)
                full[:, g * kg:(g + 1) * kg, rows, cols] += np.einsum(
                    'nchw,ck->nkhw', xs, w[g * cg:(g + 1) * cg, :, i, j])
    y = full[:, :, pads[0]:fh - pads[2], pads[1]:fw - pads[3]]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y


def pool(x, kind, kernel_shape, strides=(1, 1), pads=(0, 0, 0, 0), count_include_pad=0,
         ceil_mode=0):
    assert ceil_mode == 0, 'the exporter writes ceil_mode 0'
    n, c, h, w = x.shape
    kh, kw = kernel_shape
    oh = out_size(h, kh, strides[0], 1, pads[0], pads[2])
    ow = out_size(w, kw, strides[1], 1, pads[1], pads[3])
    widths = ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3]))
    fill = -np.inf if kind == 'max' else 0.0
    xp = np.pad(x, widths, constant_values=fill)
    # The cells a window's divisor counts: the padded plane, or the input's own cells.
    counted = np.pad(np.ones((h, w)), widths[2:], constant_values=float(count_include_pad))
    y = np.full((n, c, oh, ow), -np.inf) if kind == 'max' else np.zeros((n, c, oh, ow))
    divisor = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            rows, cols = window_slices(oh, ow, strides, (1, 1), i, j)
            if kind == 'max':
                y = np.maximum(y, xp[:, :, rows, cols])
            else:
                y += xp[:, :, rows, cols]
                divisor += counted[rows, cols]
    return y if kind == 'max' else y / divisor


def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    c = x.shape[1]
    sq = x * x
    total = np.zeros_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + (size - 1 + 1) // 2)
        total[:, ch] = sq[:, lo:hi + 1].sum(axis=1)
    return x / (bias + alpha / size * total) ** beta


# ---- shapes ----

def reshape(x, shape):
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def slice_(x, starts, ends, axes=None, steps=None):
    axes = range(x.ndim) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        dim = x.shape[a]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        index[a] = slice(s, None if e < 0 else e, st)
    return x[tuple(index)]


def topk(x, k, axis=-1, largest=1, sorted=1):
    assert largest == 1 and sorted == 1
    order = np.argsort(-x, axis=axis, kind='stable')  # equal values: the lower index first
    idx = np.take(order, np.arange(int(k[0])), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


def softmax(x, axis, log=False):
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=axis, keepdims=True)
    return z - np.log(s) if log else e / s


def reduce(fn, x, axes, keepdims):
    return fn(x, axis=tuple(axes), keepdims=bool(keepdims))


CAST = {onnx.TensorProto.FLOAT: np.float64, onnx.TensorProto.INT64: np.int64}


def run_node(op, inputs, a):
    x = inputs[0] if inputs else None
    if op == 'Identity': return [x]
    if op == 'Relu': return [np.maximum(x, 0)]
    if op == 'LeakyRelu': return [np.where(x > 0, x, a.get('alpha', 0.01) * x)]
    if op == 'Sigmoid': return [1 / (1 + np.exp(-x))]
    if op == 'Tanh': return [np.tanh(x)]
    if op == 'Abs': return [np.abs(x)]
    if op == 'Softplus': return [np.logaddexp(0, x)]
    if op == 'Elu': return [np.where(x > 0, x, a.get('alpha', 1.0) * np.expm1(x))]
    if op == 'Exp': return [np.exp(x)]
    if op == 'Log': return [np.log(x)]
    if op == 'Sqrt': return [np.sqrt(x)]
    if op == 'Add': return [x + inputs[1]]
    if op == 'Sub': return [x - inputs[1]]
    if op == 'Mul': return [x * inputs[1]]
    if op == 'Div': return [x / inputs[1]]
    if op == 'Pow': return [np.power(x, inputs[1])]
    if op == 'Max': return [np.maximum.reduce(inputs)]
    if op == 'Sum': return [np.add.reduce(inputs)]
    if op == 'Equal': return [x == inputs[1]]
    if op == 'Greater': return [x > inputs[1]]
    if op == 'Where': return [np.where(x, inputs[1], inputs[2])]
    if op == 'Cast': return [np.trunc(x).astype(np.int64) if a['to'] == onnx.TensorProto.INT64
                             else x.astype(CAST[a['to']])]
    if op == 'Clip': return [np.minimum(np.maximum(x, inputs[1]), inputs[2])]
    if op == 'PRelu': return [np.where(x > 0, x, inputs[1] * x)]
    if op == 'Expand': return [x * np.ones(inputs[1])]
    if op == 'Gemm':
        b = inputs[1].T if a.get('transB', 0) else inputs[1]
        y = a.get('alpha', 1.0) * (x @ b)
        return [y + a.get('beta', 1.0) * inputs[2] if len(inputs) > 2 else y]
    if op == 'Conv': return [conv(*inputs, **a)]
    if op == 'ConvTranspose': return [conv_transpose(*inputs, **a)]
    if op == 'MaxPool': return [pool(x, 'max', **a)]
    if op == 'AveragePool': return [pool(x, 'average', **a)]
    if op == 'GlobalMaxPool': return [x.max(axis=(2, 3), keepdims=True)]
    if op == 'GlobalAveragePool': return [x.mean(axis=(2, 3), keepdims=True)]
    if op == 'Pad':
        p = inputs[1]
        r = len(p) // 2
        return [np.pad(x, [(p[i], p[i + r]) for i in range(r)])]
    if op == 'LRN': return [lrn(x, **a)]
    if op == 'BatchNormalization':
        scale, bias, mean, var = (v.reshape((-1,) + (1,) * (x.ndim - 2)) for v in inputs[1:5])
        return [(x - mean) / np.sqrt(var + a.get('epsilon', 1e-5)) * scale + bias]
    if op == 'Softmax': return [softmax(x, a.get('axis', -1))]
    if op == 'LogSoftmax': return [softmax(x, a.get('axis', -1), log=True)]
    if op == 'Flatten':
        axis = a.get('axis', 1)
        return [x.reshape(int(np.prod(x.shape[:axis])), -1)]
    if op == 'Reshape': return [reshape(x, list(inputs[1]))]
    if op == 'Concat': return [np.concatenate(inputs, axis=a['axis'])]
    if op == 'Split':
        cuts = np.cumsum(inputs[1])[:-1]
        return np.split(x, cuts, axis=a.get('axis', 0))
    if op == 'Slice': return [slice_(x, *[list(v) for v in inputs[1:]])]
    if op == 'Tile': return [np.tile(x, inputs[1])]
    if op == 'ReduceSum': return [reduce(np.sum, x, inputs[1], a.get('keepdims', 1))]
    if op == 'ReduceMean': return [reduce(np.mean, x, a['axes'], a.get('keepdims', 1))]
    if op == 'ReduceL1':
        return [reduce(np.sum, np.abs(x), a['axes'], a.get('keepdims', 1))]
    if op == 'ReduceSumSquare':
        return [reduce(np.sum, x * x, a['axes'], a.get('keepdims', 1))]
    if op == 'TopK': return list(topk(x, inputs[1], **a))
    if op == 'Gather': return [np.take(x, inputs[1], axis=a.get('axis', 0))]
    raise NotImplementedError('operator ' + op + ' is not implemented by this evaluator')


def evaluate(model, feeds):
    values = dict(feeds)
    for init in model.graph.initializer:
        v = numpy_helper.to_array(init)
        values[init.name] = v.astype(np.float64) if v.dtype == np.float32 else v
    for node in model.graph.node:
        inputs = [values[i] for i in node.input if i]
        outputs = run_node(node.op_type, inputs, attrs(node))
        for name, v in zip(node.output, outputs):
            values[name] = v
    return [values[o.name] for o in model.graph.output]


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, 'rb') as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def check_case(case, tolerance):
    model = onnx.load(os.path.join(case, 'model.onnx'))
    onnx.checker.check_model(model, full_check=True)
    data = os.path.join(case, 'test_data_set_0')
    feeds = {i.name: read_tensor(os.path.join(data, 'input_%d.pb' % k)).astype(np.float64)
             for k, i in enumerate(model.graph.input)}
    results = evaluate(model, feeds)
    worst, count = 0.0, 0
    for k, (out, got) in enumerate(zip(model.graph.output, results)):
        want = read_tensor(os.path.join(data, 'output_%d.pb' % k))
        if got.shape != want.shape:
            return False, '%s: output %s has shape %s, Lamina\'s %s' % (
                case, out.name, got.shape, want.shape)
        diff = np.abs(got - want)
        if diff.size and not np.isfinite(diff).all():
            return False, '%s: output %s is not finite where Lamina\'s is' % (case, out.name)
        worst, count = max(worst, float(diff.max()) if diff.size else 0.0), count + diff.size
    ops = sorted({n.op_type for n in model.graph.node})
    line = '%s: max |ONNX - Lamina| = %.3g over %d values (%s)' % (
        os.path.basename(case.rstrip('/')), worst, count, ' '.join(ops))
    return worst <= tolerance, line


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--tolerance', type=float, default=1e-5)
    parser.add_argument('cases', nargs='+')
    args = parser.parse_args()
    failed = 0
    for case in args.cases:
        try:
            ok, line = check_case(case, args.tolerance)
        except Exception as e:  # a checker refusal or an operator not implemented
            ok, line = False, '%s: %s: %s' % (case, type(e).__name__, e)
        print(('ok    ' if ok else 'FAIL  ') + line)
        failed += not ok
    print('%d of %d cases agree within %g' % (len(args.cases) - failed, len(args.cases),
                                              args.tolerance))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
