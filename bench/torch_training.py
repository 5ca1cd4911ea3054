"""Timing PyTorch's training of an MNIST net, eager or as one captured CUDA graph per step.

Both modes train on the whole training set resident on the device (the GPU, or the CPU for
eager mode), a fresh permutation drawn there each epoch and 60000 // batch full batches, as
Lamina's MnistData does.

- eager: each iteration indexes the batch and runs step(x, y) (forward, loss, backward, the
  optimizer), one kernel launch at a time.
- graph: step(x, y) on the batch that a static index tensor selects is captured once with
  torch.cuda.graph after three warm-up steps on a side stream (PyTorch's whole-network
  capture recipe); each iteration copies the batch's indices into that tensor and replays
  the graph, so the gather, the step and the update are one launch.
"""
import argparse
import time

import torch

MODES = ("eager", "graph")


def reference_parser(batch_sizes):
    """The options both reference scripts take; batch_sizes is the default list."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="data/mnist")
    parser.add_argument("--batch-sizes", default=batch_sizes)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs; the median is reported")
    parser.add_argument("--modes", default="eager,graph", help="eager, graph or both")
    return parser


def runs(args):
    """(mode, batch) for every mode and batch size the options name, modes outermost."""
    modes = parse_modes(args.modes)
    return [(m, int(b)) for m in modes for b in args.batch_sizes.split(",")]


def parse_modes(text):
    modes = [m for m in text.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: unknown mode '{m}'; the modes are {', '.join(MODES)}")
    if not modes:
        raise SystemExit("--modes: give at least one of " + ", ".join(MODES))
    return modes


def capture_step(step, warmup, side=None):
    """Runs step() `warmup` times on a side stream (as PyTorch's CUDA-graph recipe asks;
    `side`, when given, is the stream a DDP model was made on), then records one call as a
    CUDA graph and returns it."""
    side = side or torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def time_training(step, x_train, y_train, batch, epochs, mode):
    """The median epoch time in seconds of `epochs` timed epochs after a warm-up.

    step(x, y) runs one training iteration on a batch; in graph mode it must be capturable
    (no host synchronisation, no per-call host values) and it is called only while warming up
    and capturing.
    """
    device = x_train.device
    iters = x_train.shape[0] // batch
    if mode == "eager":
        def run(perm, count):
            for i in range(count):
                idx = perm[i * batch:(i + 1) * batch]
                step(x_train[idx], y_train[idx])
    else:
        idx = torch.zeros(batch, dtype=torch.long, device=device)
        graph = capture_step(lambda: step(x_train[idx], y_train[idx]), 3)

        def run(perm, count):
            for i in range(count):
                idx.copy_(perm[i * batch:(i + 1) * batch])
                graph.replay()

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    run(torch.randperm(x_train.shape[0], device=device), 10)  # warm-up
    synchronize()
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        run(torch.randperm(x_train.shape[0], device=device), iters)
        synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def accuracy(model, x_test, y_test):
    with torch.no_grad():
        return (model(x_test).argmax(1) == y_test).float().mean().item()


def print_header(title):
    print(title)
    print(f"{'mode':>6} {'batch':>6} {'iters':>8} {'epoch_s':>12} {'samples/s':>14} "
          f"{'us/iter':>9} {'test_acc':>9}")


def print_row(mode, batch, iters, epoch_s, acc):
    print(f"{mode:>6} {batch:6d} {iters:8d} {epoch_s:12.4f} {iters * batch / epoch_s:14.0f} "
          f"{1e6 * epoch_s / iters:9.1f} {acc:9.4f}", flush=True)
