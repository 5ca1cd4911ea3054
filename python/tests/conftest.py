"""Fixtures of the Python module's tests: the repository, MNIST (a small subset written as
IDX files, so that nets train in a second), the lamina tool, and prototxt writers.

ctest runs each test file with PYTHONPATH at build/python and LAMINA_TOOL at build/tools/lamina
(python/CMakeLists.txt). MNIST comes from LAMINA_MNIST_DIR or the source tree's data/mnist;
tests that need it skip, saying so, without it."""
import os
import struct
import sys

import numpy as np
import pytest

REPO = os.environ.get("LAMINA_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
from mnist_idx import read_idx  # noqa: E402 (the benchmarks' IDX reader: NumPy only)

TRAIN_IMAGES, TEST_IMAGES = 2000, 1000


def write_idx(path, array):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", 0x800 | array.ndim))
        f.write(struct.pack(">" + "I" * array.ndim, *array.shape))
        f.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())


@pytest.fixture(scope="session")
def mnist_full():
    """The directory of the whole MNIST (train and t10k IDX files)."""
    directory = os.environ.get("LAMINA_MNIST_DIR") or os.path.join(REPO, "data", "mnist")
    if not os.path.exists(os.path.join(directory, "train-images-idx3-ubyte")):
        pytest.skip(f"MNIST not found in {directory} (scripts/fetch_mnist.sh, or set "
                    "LAMINA_MNIST_DIR)")
    return directory


@pytest.fixture(scope="session")
def mnist(mnist_full, tmp_path_factory):
    """A directory of MNIST's first 2000 training and 1000 test images, as IDX files."""
    directory = tmp_path_factory.mktemp("mnist")
    for prefix, count in (("train", TRAIN_IMAGES), ("t10k", TEST_IMAGES)):
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            name = f"{prefix}-{kind}"
            write_idx(directory / name, read_idx(os.path.join(mnist_full, name))[:count])
    return str(directory)


@pytest.fixture(scope="session")
def lamina_tool():
    tool = os.environ.get("LAMINA_TOOL")
    if not tool or not os.access(tool, os.X_OK):
        pytest.skip("the lamina tool is not known (ctest sets LAMINA_TOOL)")
    return tool


def mlp_net(mnist, hidden=64, batch=64, test_batch=100, shuffle=True):
    """The MNIST MLP of models/mnist/mlp_train.prototxt (784-H-10 here), on `mnist`."""
    return f"""
name: "mlp"
layer {{ name: "mnist" type: "MnistData" top: "data" top: "label" include {{ phase: TRAIN }}
  transform_param {{ scale: 0.00390625 }}
  mnist_data_param {{ images: "{mnist}/train-images-idx3-ubyte"
                     labels: "{mnist}/train-labels-idx1-ubyte" batch_size: {batch}
                     shuffle: {"true" if shuffle else "false"} }} }}
layer {{ name: "mnist" type: "MnistData" top: "data" top: "label" include {{ phase: TEST }}
  transform_param {{ scale: 0.00390625 }}
  mnist_data_param {{ images: "{mnist}/t10k-images-idx3-ubyte"
                     labels: "{mnist}/t10k-labels-idx1-ubyte" batch_size: {test_batch} }} }}
layer {{ name: "fc1" type: "Linear" bottom: "data" top: "fc1"
  inner_product_param {{ num_output: {hidden} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "fc1" top: "fc1" }}
layer {{ name: "fc2" type: "Linear" bottom: "fc1" top: "scores"
  inner_product_param {{ num_output: 10 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" top: "loss" }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "scores" bottom: "label" top: "accuracy"
  include {{ phase: TEST }} }}
"""


def write_solver(directory, mnist, max_iter=200, display=20, test_interval=100, test_iter=10,
                 lr_policy='lr_policy: "fixed"', extra="", **net_options):
    """Writes mlp.prototxt and solver.prototxt (SGD with momentum) into directory; returns
    the solver file's path."""
    directory = str(directory)
    with open(os.path.join(directory, "mlp.prototxt"), "w") as f:
        f.write(mlp_net(mnist, **net_options))
    path = os.path.join(directory, "solver.prototxt")
    with open(path, "w") as f:
        f.write(f"""net: "mlp.prototxt"
base_lr: 0.05
momentum: 0.9
{lr_policy}
max_iter: {max_iter}
display: {display}
average_loss: 5
test_iter: {test_iter}
test_interval: {test_interval}
random_seed: 1
snapshot_prefix: "{directory}/mlp"
{extra}
""")
    return path


@pytest.fixture
def solver_file(tmp_path, mnist):
    return write_solver(tmp_path, mnist)


def deploy_net(batch=5, hidden=64):
    """The MLP for inference: an Input blob "data" (batch, 1, 28, 28), Softmax "prob"."""
    return f"""
name: "mlp"
layer {{ name: "data" type: "Input" top: "data"
  input_param {{ shape {{ dim: {batch} dim: 1 dim: 28 dim: 28 }} }} }}
layer {{ name: "fc1" type: "Linear" bottom: "data" top: "fc1"
  inner_product_param {{ num_output: {hidden} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "fc1" top: "fc1" }}
layer {{ name: "fc2" type: "Linear" bottom: "fc1" top: "scores"
  inner_product_param {{ num_output: 10 }} }}
layer {{ name: "prob" type: "Softmax" bottom: "scores" top: "prob" }}
"""


def mlp_reference(images, params):
    """The deploy MLP's probabilities computed by NumPy in float64."""
    x = images.reshape(len(images), -1).astype(np.float64)
    h = np.maximum(x @ params["fc1/weight"].T.astype(np.float64) + params["fc1/bias"], 0)
    scores = h @ params["fc2/weight"].T.astype(np.float64) + params["fc2/bias"]
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
