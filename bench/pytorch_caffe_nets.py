#!/usr/bin/env python3
"""The reference for `lamina time` on bench/alexnet.prototxt and bench/googlenet.prototxt: the
same nets built in PyTorch (the layers, sizes, groups, LRN and Caffe's ceil-mode pooling of
those files), timed the way `lamina time` times its whole iteration: forward, softmax
cross-entropy and backward at batch 32 on random data held on the GPU, FP32 (TF32 off), no
weight update. cudnn.benchmark on (--deterministic: cuDNN's deterministic algorithms only, as
Lamina takes). 10 warm-up iterations, then --repeats runs of --iterations, timed with the
device synchronized; the median ms per iteration.

    python3 bench/pytorch_caffe_nets.py --batch 32 --iterations 20 --repeats 5
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def conv(cin, cout, k, stride=1, pad=0, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, groups=groups), nn.ReLU())


def lrn():
    return nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)  # Caffe's alpha / size too


def max_pool(k, s, pad=0):
    return nn.MaxPool2d(k, s, pad, ceil_mode=True)  # Caffe rounds pooled sizes up


def alexnet():
    return nn.Sequential(
        conv(3, 96, 11, 4), lrn(), max_pool(3, 2),
        conv(96, 256, 5, pad=2, groups=2), lrn(), max_pool(3, 2),
        conv(256, 384, 3, pad=1), conv(384, 384, 3, pad=1, groups=2),
        conv(384, 256, 3, pad=1, groups=2), max_pool(3, 2), nn.Flatten(),
        nn.Linear(256 * 6 * 6, 4096), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, 1000))


class Inception(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, pp):
        super().__init__()
        self.b1 = conv(cin, c1, 1)
        self.b3 = nn.Sequential(conv(cin, c3r, 1), conv(c3r, c3, 3, pad=1))
        self.b5 = nn.Sequential(conv(cin, c5r, 1), conv(c5r, c5, 5, pad=2))
        self.bp = nn.Sequential(max_pool(3, 1, 1), conv(cin, pp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


def googlenet():
    return nn.Sequential(
        conv(3, 64, 7, 2, 3), max_pool(3, 2), lrn(),
        conv(64, 64, 1), conv(64, 192, 3, pad=1), lrn(), max_pool(3, 2),
        Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64),
        max_pool(3, 2),
        Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
        Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
        Inception(528, 256, 160, 320, 32, 128, 128), max_pool(3, 2),
        Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128),
        nn.AvgPool2d(7, 1, ceil_mode=True), nn.Dropout(0.4), nn.Flatten(),
        nn.Linear(1024, 1000))


def time_net(model, size, args):
    x = torch.randn(args.batch, 3, size, size, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")

    def step():
        for p in model.parameters():
            p.grad = None
        F.cross_entropy(model(x), y).backward()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.iterations):
            step()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) * 1000 / args.iterations)
    return sorted(runs)[len(runs) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--deterministic", action="store_true")
    args = parser.parse_args()
    for name, value in (("--batch", args.batch), ("--iterations", args.iterations),
                        ("--repeats", args.repeats)):
        if value < 1:
            parser.error(f"{name} must be >= 1, got {value}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = args.deterministic
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}, batch {args.batch}, "
          f"FP32, cudnn.benchmark{' deterministic' if args.deterministic else ''}")
    for name, build, size in (("AlexNet", alexnet, 227), ("GoogLeNet", googlenet, 224)):
        model = build().cuda().train()
        print(f"{name} {size}x{size}: forward+backward {time_net(model, size, args):.3f} "
              f"ms per iteration")


if __name__ == "__main__":
    main()
