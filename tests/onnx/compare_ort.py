#!/usr/bin/env python3
"""Runs Lamina's exported ONNX models in ONNX Runtime and compares them with Lamina.

Usage: compare_ort.py DIR [--tolerance T]

DIR is what onnx_ort_prepare wrote (tests/onnx/prepare_ort_check.cpp): the MNIST MLP and
LeNet exported at a batch of 100 with Lamina's probabilities for the 10,000 MNIST test images,
the MNIST test set, and a deep net (tests/onnx/deep_net.prototxt, random weights) with one
batch of inputs and Lamina's outputs. Needs numpy and onnxruntime only (not the onnx
package). For each execution provider available among CPU and CUDA (CUDA with TF32 off, so
that it computes in FP32 as Lamina does), prints for each net the largest absolute
difference between ONNX Runtime's outputs and Lamina's, and for the MNIST nets ONNX
Runtime's top-1 accuracy on the test set (and Lamina's, from its probabilities) and the
number of images whose predicted class differs. Exits 1 when a difference exceeds the
tolerance (default 1e-5) or a prediction differs.
"""
import argparse
import os
import sys

import numpy as np
import onnxruntime as ort


def session(model, provider):
    options = ort.SessionOptions()
    s = None
    if provider == 'CUDAExecutionProvider':
        try:
            s = ort.InferenceSession(model, options, providers=[(provider, {'use_tf32': 0})])
        except Exception:  # an onnxruntime without the use_tf32 option
            s = None
    if s is None:
        s = ort.InferenceSession(model, options, providers=[provider])
    if provider not in s.get_providers():  # ORT fell back to another provider
        raise RuntimeError('%s: the session runs on %s, not %s' % (model, s.get_providers(),
                                                                   provider))
    return s


def mnist_net(directory, name, images, labels, provider):
    s = session(os.path.join(directory, name, 'model.onnx'), provider)
    (inp,), out = s.get_inputs(), s.get_outputs()[0].name
    batch = inp.shape[0]
    probs = []
    for first in range(0, len(images), batch):
        x = (images[first:first + batch].astype(np.float32) * np.float32(0.00390625))
        probs.append(s.run([out], {inp.name: x.reshape(inp.shape)})[0])
    probs = np.concatenate(probs).reshape(len(images), -1)
    lamina = np.fromfile(os.path.join(directory, name, 'lamina_prob.f32'),
                         dtype=np.float32).reshape(probs.shape)
    diff = float(np.abs(probs - lamina).max())
    accuracy = float((probs.argmax(axis=1) == labels).mean())
    lamina_accuracy = float((lamina.argmax(axis=1) == labels).mean())
    # Images whose predicted class differs: a difference fails like one above tolerance.
    differing = int((probs.argmax(axis=1) != lamina.argmax(axis=1)).sum())
    return diff, '%d images, ORT top-1 accuracy %.4f (Lamina %.4f), %d predictions differ' % (
        len(images), accuracy, lamina_accuracy, differing), differing == 0


def deep_net(directory, provider):
    d = os.path.join(directory, 'deep_net')
    s = session(os.path.join(d, 'model.onnx'), provider)
    (inp,) = s.get_inputs()
    x = np.fromfile(os.path.join(d, 'input_0.f32'), dtype=np.float32).reshape(inp.shape)
    worst, details = 0.0, []
    for i, (o, got) in enumerate(zip(s.get_outputs(), s.run(None, {inp.name: x}))):
        want = np.fromfile(os.path.join(d, 'output_%d.f32' % i), dtype=np.float32)
        diff = float(np.abs(got.ravel() - want).max())
        worst = max(worst, diff)
        details.append('%s %.3g (|Lamina| up to %.3g)' % (o.name, diff,
                                                          float(np.abs(want).max())))
    return worst, 'input %s; per output: %s' % (list(x.shape), ', '.join(details)), True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('directory')
    parser.add_argument('--tolerance', type=float, default=1e-5)
    args = parser.parse_args()
    images = np.fromfile(os.path.join(args.directory, 'mnist_test_images.u8'),
                         dtype=np.uint8).reshape(-1, 784)
    labels = np.fromfile(os.path.join(args.directory, 'mnist_test_labels.u8'), dtype=np.uint8)
    print('onnxruntime %s, providers available: %s' % (
        ort.__version__, ', '.join(ort.get_available_providers())))
    providers = [p for p in ('CPUExecutionProvider', 'CUDAExecutionProvider')
                 if p in ort.get_available_providers()]
    failed = 0
    for provider in providers:
        results = [('mnist_mlp',) + mnist_net(args.directory, 'mnist_mlp', images, labels,
                                              provider),
                   ('lenet',) + mnist_net(args.directory, 'lenet', images, labels, provider),
                   ('deep_net',) + deep_net(args.directory, provider)]
        for name, diff, detail, same_classes in results:
            ok = diff <= args.tolerance and same_classes
            failed += not ok
            print('%s %-22s %-9s max |ORT - Lamina| = %.3g; %s' % (
                'ok  ' if ok else 'FAIL', provider, name, diff, detail))
    print('PASS: every difference within %g, the same predictions' % args.tolerance
          if not failed else
          'FAIL: %d nets above %g or predicting other classes' % (failed, args.tolerance))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
