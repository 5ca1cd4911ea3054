#!/usr/bin/env python3
"""The reference for Lamina's data-parallel benchmark: the MNIST MLP trained by PyTorch
DistributedDataParallel, one process per GPU, launched by torchrun.

784-H-H-10 (H = --hidden, default 4096) with ReLU, softmax cross-entropy, SGD lr 0.01
momentum 0.9, float32 (TF32 off). Every rank holds MNIST on its GPU (the GPU of its
LOCAL_RANK) and wraps the model in DDP with the default buckets. An epoch is 60000 // (N * B)
global batches of N * B rows of a permutation drawn from --seed (the same on every rank); rank
r trains on rows [r * B, (r + 1) * B) of each. --warmup epochs are not timed; the epoch time
is the median of --epochs timed epochs (each the slowest rank's, the device synchronised
before the clock is read). Rank 0 prints one line per per-GPU batch size:

    ddp  workers N  batch/gpu B  global G  epoch_s X  samples/s Y  test_acc Z

(ddp_graph with --graph: each step, gather and all-reduce included, replays one CUDA graph
captured as PyTorch's notes on CUDA graphs with DDP say). Run with N = 1 and N = 2 and divide
the samples/s for the 2-GPU speedup.

    torchrun --standalone --nproc-per-node 2 bench/pytorch_ddp.py --data-dir data/mnist
    torchrun --standalone --nproc-per-node 1 bench/pytorch_ddp.py --batch-size 256,1024 --graph
    torchrun --standalone --nproc-per-node 2 bench/pytorch_ddp.py --cpu --hidden 64 \
        --batch-size 64 --epochs 1 --warmup 0     # gloo on the CPU: checks the script only
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from mnist_idx import load_mnist
from torch_training import accuracy, capture_step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="data/mnist")
    parser.add_argument("--hidden", type=int, default=4096, help="width of the hidden layers")
    parser.add_argument("--batch-size", default="1024",
                        help="rows per GPU per step; a comma list runs each")
    parser.add_argument("--epochs", type=int, default=3,
                        help="timed epochs; the median is reported")
    parser.add_argument("--warmup", type=int, default=1, help="untimed epochs before them")
    parser.add_argument("--seed", type=int, default=1, help="seed of the epochs' permutations")
    parser.add_argument("--graph", action="store_true", help="replay each step as one CUDA graph")
    parser.add_argument("--cpu", action="store_true", help="gloo on the CPU, to check the script")
    args = parser.parse_args()
    if args.cpu and args.graph:
        raise SystemExit("--graph: CUDA graphs are for the GPU")

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 arithmetic, as Lamina's
        torch.backends.cudnn.allow_tf32 = False
        if args.graph:  # PyTorch's CUDA-graph notes: no async error handling with DDP capture
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
            os.environ["NCCL_ASYNC_ERROR_HANDLING"] = "0"
        dist.init_process_group("nccl", device_id=device)
    rank, workers = dist.get_rank(), dist.get_world_size()
    x_train, y_train, x_test, y_test = load_mnist(args.data_dir, device, (-1, 784))
    h = args.hidden
    if rank == 0:
        where = "CPU (gloo)" if args.cpu else torch.cuda.get_device_name(device) + " (nccl)"
        print(f"PyTorch {torch.__version__} DDP MLP 784-{h}-{h}-10 on {workers} x {where}",
              flush=True)

    for batch in (int(b) for b in args.batch_size.split(",")):
        glob = workers * batch
        iters = x_train.shape[0] // glob
        if iters < 1:
            raise SystemExit(f"--batch-size {batch}: the global batch {glob} exceeds the data")
        gen = torch.Generator().manual_seed(args.seed)  # the same permutations on every rank
        perms = [torch.randperm(x_train.shape[0], generator=gen).to(device)
                 for _ in range(args.warmup + args.epochs)]

        torch.manual_seed(1)
        model = torch.nn.Sequential(
            torch.nn.Linear(784, h), torch.nn.ReLU(),
            torch.nn.Linear(h, h), torch.nn.ReLU(),
            torch.nn.Linear(h, 10)).to(device)
        side = torch.cuda.Stream() if args.graph else None
        if args.cpu:
            ddp = DistributedDataParallel(model)
        else:
            with torch.cuda.stream(side):  # a no-op when side is None
                ddp = DistributedDataParallel(model, device_ids=[local_rank])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x), y).backward()
            opt.step()

        def shard(perm, i):  # this rank's rows of global batch i
            return perm[i * glob + rank * batch:i * glob + (rank + 1) * batch]

        if args.graph:  # >= 11 DDP eager steps on the side stream, then capture one
            idx = shard(perms[0], 0).clone()
            graph = capture_step(lambda: step(x_train[idx], y_train[idx]), 11, side)

            def run(perm):
                for i in range(iters):
                    idx.copy_(shard(perm, i))
                    graph.replay()
        else:
            def run(perm):
                for i in range(iters):
                    rows = shard(perm, i)
                    step(x_train[rows], y_train[rows])

        def synchronize():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        times = []
        for e, perm in enumerate(perms):
            synchronize()
            dist.barrier()
            start = time.perf_counter()
            run(perm)
            synchronize()
            if e >= args.warmup:
                times.append(time.perf_counter() - start)
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        epoch_s = sorted(slowest.tolist())[len(times) // 2] if times else float("nan")
        if rank == 0:
            acc = accuracy(ddp.module, x_test, y_test)
            print(f"{'ddp_graph' if args.graph else 'ddp'}  workers {workers}  "
                  f"batch/gpu {batch}  global {glob}  epoch_s {epoch_s:.4f}  "
                  f"samples/s {iters * glob / epoch_s:.0f}  test_acc {acc:.4f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
