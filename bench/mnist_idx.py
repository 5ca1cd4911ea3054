"""MNIST for the PyTorch reference benchmarks: the IDX files (plain or .gz) on the GPU.
read_idx needs NumPy alone (the Python module's tests read MNIST with it)."""
import gzip
import os
import struct

import numpy as np


def read_idx(path):
    """An IDX file of unsigned bytes as a numpy array; X falls back to X.gz, as Lamina's reader."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_mnist(data_dir, device, shape):
    """(x_train, y_train, x_test, y_test) on device; images scaled by 1/256 (Lamina's
    transform_param scale 0.00390625) and viewed as shape, e.g. (-1, 784) or (-1, 1, 28, 28)."""
    import torch

    def images(name):
        x = torch.tensor(read_idx(os.path.join(data_dir, name)), device=device)
        return x.float().mul_(0.00390625).view(*shape)

    def labels(name):
        return torch.tensor(read_idx(os.path.join(data_dir, name)), device=device).long()

    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))
