#!/usr/bin/env python3
"""The reference for bench/conv_bench: the same net (bench/resnet_blocks.prototxt: a 3x3
convolution to 64 channels with batch normalisation and ReLU, 4 ResNet basic blocks of two
3x3 convolutions at 64 channels and 32x32, global average pooling, a linear layer to 10
classes, softmax cross-entropy) trained by PyTorch in channels-last memory on random data held
on the GPU, SGD with momentum 0.9 (lr 0.01), cudnn.benchmark on (--deterministic: cuDNN's
deterministic algorithms only, as Lamina takes).

Precisions: fp32 (TF32 off), tf32 (TF32 on for matmuls and cuDNN), bf16 and fp16
(torch.autocast; fp16 with a GradScaler). Modes: eager, and graph (one training step captured
as a CUDA graph after warm-up on a side stream and replayed; not for fp16, whose GradScaler
reads its overflow flag on the host). Each run: 10 warm-up iterations, then --repeats runs of
--iterations iterations, timed with the device synchronized; the median in images/s.

    python3 bench/pytorch_conv.py --batch 256 --iterations 50 --repeats 5 \
        --precisions fp32,tf32,bf16,fp16 --modes eager,graph
"""
import argparse
import time

import torch
import torch.nn.functional as F

from torch_training import capture_step


class BasicBlock(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


def resnet_blocks():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(), *[BasicBlock(64) for _ in range(4)],
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))


def make_step(model, precision):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None,
                            cache_enabled=False):
            loss = F.cross_entropy(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    return step


def time_runs(run, iterations, repeats):
    run(10)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(iterations)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] / iterations


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    parser.add_argument("--modes", default="eager,graph")
    parser.add_argument("--deterministic", action="store_true",
                        help="cuDNN's deterministic algorithms only, as Lamina chooses")
    args = parser.parse_args()
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = args.deterministic
    print(f"PyTorch {torch.__version__} resnet_blocks (channels-last), batch {args.batch}, "
          f"{'deterministic ' if args.deterministic else ''}cuDNN, on "
          f"{torch.cuda.get_device_name(0)}")
    print(f"{'precision':>9} {'mode':>6} {'images/s':>12} {'ms/iter':>10}")
    gen = torch.Generator(device=device).manual_seed(1)
    x = (torch.rand(args.batch, 3, 32, 32, device=device, generator=gen) * 2 - 1)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (args.batch,), device=device, generator=gen)
    for precision in args.precisions.split(","):
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        for mode in args.modes.split(","):
            if mode == "graph" and precision == "fp16":
                print(f"{precision:>9} {mode:>6} {'GradScaler cannot be captured':>23}")
                continue
            torch.manual_seed(1)
            model = resnet_blocks().to(device).to(memory_format=torch.channels_last)
            step = make_step(model, precision)
            if mode == "eager":
                def run(count):
                    for _ in range(count):
                        step(x, y)
            else:
                graph = capture_step(lambda: step(x, y), 3)

                def run(count):
                    for _ in range(count):
                        graph.replay()
            per_iter = time_runs(run, args.iterations, args.repeats)
            print(f"{precision:>9} {mode:>6} {args.batch / per_iter:12.0f} "
                  f"{1e3 * per_iter:10.3f}", flush=True)


if __name__ == "__main__":
    main()
