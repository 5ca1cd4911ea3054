#!/usr/bin/env python3
"""The reference for bench/lenet_bench --gpu: the same LeNet trained by PyTorch in eager mode.

Caffe's LeNet as in models/mnist/lenet_train.prototxt: conv 20 5x5, max pool 2/2, conv 50 5x5,
max pool 2/2, linear 500, ReLU, linear 10, softmax cross-entropy; Caffe's xavier weights
(uniform, +-sqrt(3 / fan_in)), zero biases; Caffe's solver: SGD lr 0.01 (biases 0.02, lr_mult
2), momentum 0.9, weight decay 0.0005, lr policy inv (gamma 1e-4, power 0.75) per iteration.
The whole training set is resident on the GPU, each epoch is a fresh permutation drawn on the
GPU and 60000 // batch full batches, as Lamina's MnistData does. cuDNN in float32 (no TF32),
with cudnn.benchmark on. Prints the median epoch time per batch size, then the test accuracy
after the warm-up and the timed epochs.

    python3 bench/pytorch_lenet.py --data-dir data/mnist --batch-sizes 64,256 --epochs 3
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

from mnist_idx import load_mnist


def lenet():
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 20, 5), torch.nn.MaxPool2d(2, 2),
        torch.nn.Conv2d(20, 50, 5), torch.nn.MaxPool2d(2, 2),
        torch.nn.Flatten(),
        torch.nn.Linear(800, 500), torch.nn.ReLU(),
        torch.nn.Linear(500, 10))
    for m in net:
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            fan_in = m.weight[0].numel()  # Caffe's xavier: count / shape[0]
            bound = math.sqrt(3.0 / fan_in)
            torch.nn.init.uniform_(m.weight, -bound, bound)
            torch.nn.init.zeros_(m.bias)
    return net


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="data/mnist")
    parser.add_argument("--batch-sizes", default="64,256")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs; the median is reported")
    args = parser.parse_args()

    device = torch.device("cuda")
    x_train, y_train, x_test, y_test = load_mnist(args.data_dir, device, (-1, 1, 28, 28))
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 arithmetic, as Lamina's
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    print(f"PyTorch {torch.__version__} eager, cuDNN {torch.backends.cudnn.version()}, "
          f"on {torch.cuda.get_device_name(0)}")
    print(f"{'batch':>6} {'iters':>8} {'epoch_s':>12} {'samples/s':>14} {'test_acc':>9}")

    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        torch.manual_seed(1)
        model = lenet().to(device)
        weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
        biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
        opt = torch.optim.SGD([{"params": weights, "lr": 0.01}, {"params": biases, "lr": 0.02}],
                              lr=0.01, momentum=0.9, weight_decay=0.0005)
        inv = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: (1 + 1e-4 * it) ** -0.75)
        iters = x_train.shape[0] // batch

        def train(perm, count):
            for i in range(count):
                idx = perm[i * batch:(i + 1) * batch]
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                inv.step()

        # Warm-up: kernels, cuDNN's algorithm search, the caching allocator.
        train(torch.randperm(x_train.shape[0], device=device), 10)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.epochs):
            start = time.perf_counter()
            train(torch.randperm(x_train.shape[0], device=device), iters)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        median = sorted(times)[len(times) // 2]
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"{batch:6d} {iters:8d} {median:12.3f} {iters * batch / median:14.0f} {accuracy:9.4f}")


if __name__ == "__main__":
    main()
