#!/usr/bin/env python3
"""The reference for bench/mlp_bench: the same MNIST MLP trained by PyTorch in eager mode.

784-512-512-10 with ReLU, softmax cross-entropy, SGD lr 0.01 momentum 0.9, the whole training
set resident on the GPU, a fresh permutation each epoch on the GPU and full batches only
(epoch = 60000 // batch iterations), as Lamina's MnistData does. Prints the median epoch time
per batch size, then the test accuracy after the timed epochs.

    python3 bench/pytorch_mlp.py --data-dir data/mnist --batch-sizes 20,64,256 --epochs 3
"""
import argparse
import time

import torch
import torch.nn.functional as F

from mnist_idx import load_mnist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="data/mnist")
    parser.add_argument("--batch-sizes", default="20,64,256")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs; the median is reported")
    args = parser.parse_args()

    device = torch.device("cuda")
    x_train, y_train, x_test, y_test = load_mnist(args.data_dir, device, (-1, 784))
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 arithmetic, as Lamina's
    print(f"PyTorch {torch.__version__} eager on {torch.cuda.get_device_name(0)}")
    print(f"{'batch':>6} {'iters':>8} {'epoch_s':>12} {'samples/s':>14} {'test_acc':>9}")

    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        torch.manual_seed(1)
        model = torch.nn.Sequential(
            torch.nn.Linear(784, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        iters = x_train.shape[0] // batch

        def epoch():
            perm = torch.randperm(x_train.shape[0], device=device)
            for i in range(iters):
                idx = perm[i * batch:(i + 1) * batch]
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        # Warm-up: kernels, cuBLAS handles, the caching allocator.
        perm = torch.randperm(x_train.shape[0], device=device)
        for i in range(10):
            idx = perm[i * batch:(i + 1) * batch]
            F.cross_entropy(model(x_train[idx]), y_train[idx]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.epochs):
            start = time.perf_counter()
            epoch()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        median = sorted(times)[len(times) // 2]
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"{batch:6d} {iters:8d} {median:12.3f} {iters * batch / median:14.0f} {accuracy:9.4f}")


if __name__ == "__main__":
    main()
