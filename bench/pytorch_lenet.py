#!/usr/bin/env python3
"""The reference for bench/lenet_bench --gpu: the same LeNet trained by PyTorch, eager and as
one captured CUDA graph per step (bench/torch_training.py says how each is timed).

Caffe's LeNet as in models/mnist/lenet_train.prototxt: conv 20 5x5, max pool 2/2, conv 50 5x5,
max pool 2/2, linear 500, ReLU, linear 10, softmax cross-entropy; Caffe's xavier weights
(uniform, +-sqrt(3 / fan_in)), zero biases; Caffe's solver: SGD lr 0.01 (biases 0.02, lr_mult
2), momentum 0.9, weight decay 0.0005, lr policy inv (gamma 1e-4, power 0.75) per iteration.
Eager mode uses torch.optim.SGD and LambdaLR; graph mode cannot take a learning rate from the
host each step, so it keeps the iteration count on the GPU and does the same update (d = g +
0.0005 w; h = 0.9 h + d; w -= lr h, PyTorch SGD's arithmetic) with the rate computed there.
cuDNN in float32 (no TF32), with cudnn.benchmark on. Prints the median epoch time per mode and
batch size, then the test accuracy after the warm-up and the timed epochs.

    python3 bench/pytorch_lenet.py --data-dir data/mnist --batch-sizes 64,256 --epochs 3 \
        --modes eager,graph
"""
import math

import torch
import torch.nn.functional as F

from mnist_idx import load_mnist
from torch_training import accuracy, print_header, print_row, reference_parser, runs, time_training

BASE_LR, BIAS_LR, MOMENTUM, WEIGHT_DECAY, GAMMA, POWER = 0.01, 0.02, 0.9, 0.0005, 1e-4, 0.75


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


def eager_step(model):
    """torch.optim.SGD with the inv policy as a LambdaLR stepped each iteration."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD([{"params": weights, "lr": BASE_LR}, {"params": biases, "lr": BIAS_LR}],
                          lr=BASE_LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    inv = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: (1 + GAMMA * it) ** -POWER)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        inv.step()
    return step


def graph_step(model, device):
    """The same update with the iteration count and the inv rate on the GPU: capturable."""
    params = list(model.parameters())
    base = [BIAS_LR if n.endswith("bias") else BASE_LR for n, _ in model.named_parameters()]
    history = [torch.zeros_like(p) for p in params]
    it = torch.zeros((), device=device)

    def step(x, y):
        for p in params:
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        factor = (1 + GAMMA * it) ** -POWER
        it.add_(1)
        with torch.no_grad():
            for p, h, lr in zip(params, history, base):
                h.mul_(MOMENTUM).add_(p.grad).add_(p, alpha=WEIGHT_DECAY)
                p.sub_(h * (lr * factor))
    return step


def main():
    args = reference_parser("64,256").parse_args()
    todo = runs(args)

    device = torch.device("cuda")
    x_train, y_train, x_test, y_test = load_mnist(args.data_dir, device, (-1, 1, 28, 28))
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 arithmetic, as Lamina's
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    print_header(f"PyTorch {torch.__version__} LeNet, cuDNN {torch.backends.cudnn.version()}, "
                 f"on {torch.cuda.get_device_name(0)}")

    for mode, batch in todo:
        torch.manual_seed(1)
        model = lenet().to(device)
        step = eager_step(model) if mode == "eager" else graph_step(model, device)
        epoch_s = time_training(step, x_train, y_train, batch, args.epochs, mode)
        print_row(mode, batch, x_train.shape[0] // batch, epoch_s, accuracy(model, x_test, y_test))


if __name__ == "__main__":
    main()
