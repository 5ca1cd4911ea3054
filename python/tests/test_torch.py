"""Lamina against PyTorch: the MNIST MLP of models/mnist/mlp_deploy.prototxt, its weights
copied through lamina (Net.params as NumPy) into a torch.nn model, run on the same batch of
MNIST test images; the probabilities must agree. Skips when torch cannot be imported.

    python3 python/tests/test_torch.py [--weights W.lamina] [--device cuda:0]

prints the largest absolute difference of the scores and probabilities on each device."""
import argparse
import os
import sys

import numpy as np
import pytest

import lamina
from conftest import REPO, read_idx

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the comparison runs "
                                            "where it is (the GPU machine)")
DEPLOY = os.path.join(REPO, "models", "mnist", "mlp_deploy.prototxt")
BATCH = 64


def torch_mlp(net, device):
    """784-512-512-10 with ReLU, the Linear layers holding the net's weights ((K, C) as
    torch.nn.Linear's, as Caffe's InnerProduct)."""
    layers = [torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
              torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)]
    linears = [layer for layer in layers if isinstance(layer, torch.nn.Linear)]
    with torch.no_grad():
        for linear, name in zip(linears, ("mlp/fc1", "mlp/fc2", "mlp/fc3")):
            linear.weight.copy_(torch.from_numpy(net.params[name + "/weight"].data))
            linear.bias.copy_(torch.from_numpy(net.params[name + "/bias"].data))
    return torch.nn.Sequential(*layers).to(device).eval()


def images(mnist_dir):
    pixels = read_idx(os.path.join(mnist_dir, "t10k-images-idx3-ubyte"))[:BATCH]
    return (pixels.astype(np.float32) * np.float32(0.00390625)).reshape(BATCH, 1, 28, 28)


def differences(device, weights, x):
    """(max |scores difference|, max |probabilities difference|) of Lamina and PyTorch."""
    net = lamina.Net(DEPLOY, weights, device=device, input_shapes={"data": (BATCH, 1, 28, 28)},
                     seed=1)
    if weights is None:  # Xavier weights from the fillers; biases (zero there) set here
        rng = np.random.default_rng(1)
        for name, p in net.params.items():
            if name.endswith("/bias"):
                p.data = rng.uniform(-0.1, 0.1, p.shape)
    prob = net.forward(data=x)["prob"]
    scores = net.blobs["scores"].data
    model = torch_mlp(net, "cpu" if device == "cpu" else device)
    with torch.no_grad():
        torch_scores = model(torch.from_numpy(x).to(model[1].weight.device)).cpu().numpy()
    torch_prob = torch.softmax(torch.from_numpy(torch_scores), dim=1).numpy()
    return np.abs(scores - torch_scores).max(), np.abs(prob - torch_prob).max()


def devices():
    return [d for d in lamina.devices()[:2] if d == "cpu" or torch.cuda.is_available()]


@pytest.mark.parametrize("device", devices())
def test_lamina_and_pytorch_agree(mnist, device):
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 products, as Lamina's
    score_diff, prob_diff = differences(device, None, images(mnist))
    print(f"{device}: max |scores difference| {score_diff:.3g}, "
          f"max |probabilities difference| {prob_diff:.3g}")
    assert score_diff < 1e-4 and prob_diff < 1e-5


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="a weights file for the deploy MLP (default: the "
                                          "seeded fillers, random biases)")
    parser.add_argument("--mnist", default=os.path.join(REPO, "data", "mnist"))
    parser.add_argument("--device", action="append", help="default: cpu and cuda:0 if present")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    for device in args.device or devices():
        score_diff, prob_diff = differences(device, args.weights, images(args.mnist))
        print(f"{device}: max |scores difference| {score_diff:.3g}, "
              f"max |probabilities difference| {prob_diff:.3g}")
    sys.exit(0)
