#!/usr/bin/env python3
"""The reference for bench/mlp_bench: the same MNIST MLP trained by PyTorch, eager and as one
captured CUDA graph per step (bench/torch_training.py says how each is timed).

784-H-H-10 (H = --hidden, default 512) with ReLU, softmax cross-entropy, SGD lr 0.01
momentum 0.9, float32 (no TF32 unless --tf32; --amp bf16 or fp16: torch.autocast, FP16 with
a GradScaler; a mode whose step cannot be captured prints why instead of a time).
Prints the median epoch time per mode and batch size, then the test accuracy after the timed
epochs.

    python3 bench/pytorch_mlp.py --data-dir data/mnist --batch-sizes 20,64,256 --epochs 3 \
        --modes eager,graph
    taskset -c 0,1 python3 bench/pytorch_mlp.py --cpu-threads 2 --modes eager   # on 2 cores
"""
import torch
import torch.nn.functional as F

from mnist_idx import load_mnist
from torch_training import accuracy, print_header, print_row, reference_parser, runs, time_training


def main():
    parser = reference_parser("20,64,256")
    parser.add_argument("--hidden", type=int, default=512, help="width of the hidden layers")
    parser.add_argument("--cpu-threads", type=int, default=0,
                        help="train on the CPU with this many threads (eager mode only; pin "
                             "the process with taskset to compare with Lamina's Native backend)")
    parser.add_argument("--tf32", action="store_true",
                        help="matrix products in TF32 (torch.backends.cuda.matmul.allow_tf32)")
    parser.add_argument("--amp", choices=["bf16", "fp16"],
                        help="mixed precision: torch.autocast in this type (FP16 with a "
                             "GradScaler)")
    args = parser.parse_args()
    todo = runs(args)

    if args.cpu_threads > 0:
        if any(mode == "graph" for mode, _ in todo):
            raise SystemExit("--cpu-threads: CUDA graphs are for the GPU; use --modes eager")
        torch.set_num_threads(args.cpu_threads)
        device = torch.device("cpu")
        where = f"the CPU ({args.cpu_threads} threads)"
    else:
        device = torch.device("cuda")
        where = torch.cuda.get_device_name(0)
        # float32 arithmetic as Lamina's FP32, or TF32 products as its TF32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    x_train, y_train, x_test, y_test = load_mnist(args.data_dir, device, (-1, 784))
    h = args.hidden
    precision = f"AMP {args.amp.upper()}" if args.amp else "TF32" if args.tf32 else "FP32"
    print_header(f"PyTorch {torch.__version__} MLP 784-{h}-{h}-10 on {where} in {precision}")

    for mode, batch in todo:
        torch.manual_seed(1)
        model = torch.nn.Sequential(
            torch.nn.Linear(784, h), torch.nn.ReLU(),
            torch.nn.Linear(h, h), torch.nn.ReLU(),
            torch.nn.Linear(h, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
        scaler = torch.amp.GradScaler("cuda") if args.amp == "fp16" else None

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            if dtype is None:
                F.cross_entropy(model(x), y).backward()
                opt.step()
                return
            # No cast cache: a captured graph must cast the weights every replay.
            with torch.autocast("cuda", dtype=dtype, cache_enabled=False):
                loss = F.cross_entropy(model(x), y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

        try:
            epoch_s = time_training(step, x_train, y_train, batch, args.epochs, mode)
        except RuntimeError as e:
            print(f"{mode:>6} {batch:6d}  cannot run: {str(e).splitlines()[0][:150]}", flush=True)
            continue
        print_row(mode, batch, x_train.shape[0] // batch, epoch_s, accuracy(model, x_test, y_test))


if __name__ == "__main__":
    main()
