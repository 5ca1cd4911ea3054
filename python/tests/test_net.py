"""lamina.Net: forward passes agree with the lamina tool and with NumPy, inputs and outputs,
input_shapes, states."""
import os
import subprocess

import numpy as np
import pytest

import lamina
from conftest import deploy_net, mlp_net, mlp_reference, read_idx


def test_forward_scores_as_lamina_test_does(tmp_path, mnist, lamina_tool):
    # Weights from the seeded fillers, scored by the tool and by Python on the same TEST net:
    # the tool prints the mean of each output over the batches (6 significant digits).
    model = tmp_path / "mlp.prototxt"
    model.write_text(mlp_net(mnist))
    weights = str(tmp_path / "filled.lamina")
    lamina.Net(str(model), phase="train", seed=7).save(weights)
    printed = subprocess.run(
        [lamina_tool, "test", "--model", str(model), "--weights", weights, "--iterations", "4"],
        check=True, capture_output=True, text=True).stdout
    tool = dict(line.split(" = ") for line in printed.splitlines() if " = " in line)

    net = lamina.Net(str(model), weights)
    sums = {}
    for _ in range(4):
        for name, value in net.forward().items():
            sums[name] = sums.get(name, 0.0) + float(value)
    assert set(sums) == set(tool) == {"loss", "accuracy"}
    for name, total in sums.items():
        assert format(total / 4, ".6g") == tool[name], name


def test_deploy_forward_matches_numpy(mnist):
    net = lamina.Net.from_text(deploy_net(batch=5), seed=3)
    images = read_idx(os.path.join(mnist, "t10k-images-idx3-ubyte"))[:5]
    x = (images.astype(np.float32) * np.float32(0.00390625)).reshape(5, 1, 28, 28)
    prob = net.forward(data=x)["prob"]
    params = {name: p.data for name, p in net.params.items()}
    assert prob.shape == (5, 10)
    np.testing.assert_allclose(prob, mlp_reference(x, params), rtol=1e-5, atol=1e-6)
    assert net.inputs == ["data"] and net.outputs == ["prob"]
    assert net.layer_types == ["Input", "Linear", "ReLU", "Linear", "Softmax"]


def test_outputs_are_copies_and_blobs_are_the_net(mnist):
    net = lamina.Net.from_text(deploy_net(batch=2))
    x = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)
    out = net.forward(data=x)["prob"]
    out[:] = 0  # a copy: the net's blob keeps its values
    assert np.all(net.blobs["prob"].data > 0)
    np.testing.assert_array_equal(net.blobs["data"].data, x)


def test_input_shapes_choose_the_batch(mnist):
    net = lamina.Net.from_text(deploy_net(batch=1), input_shapes={"data": (7, 1, 28, 28)})
    assert net.blobs["data"].shape == (7, 1, 28, 28)
    assert net.forward(data=np.zeros((7, 1, 28, 28)))["prob"].shape == (7, 10)
    with pytest.raises(ValueError, match="'image', which is not a top of an Input layer.*'data'"):
        lamina.Net.from_text(deploy_net(), input_shapes={"image": (1, 784)})


def test_input_header_takes_input_shapes():
    header = """input: "data" input_shape { dim: 1 dim: 3 }
layer { name: "ip" type: "Linear" bottom: "data" top: "ip" inner_product_param { num_output: 2 } }
"""
    net = lamina.Net.from_text(header, input_shapes={"data": (4, 3)})
    assert net.forward(data=np.ones((4, 3)))["ip"].shape == (4, 2)


def test_stages_choose_layers():
    text = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "Linear" bottom: "data" top: "out" inner_product_param { num_output: 4 }
        include { stage: "wide" } }
layer { name: "b" type: "Linear" bottom: "data" top: "out" inner_product_param { num_output: 1 }
        exclude { stage: "wide" } }
"""
    assert lamina.Net.from_text(text).blobs["out"].shape == (2, 1)
    assert lamina.Net.from_text(text, stages=["wide"]).blobs["out"].shape == (2, 4)


def test_train_phase_runs_the_data_layer(mnist):
    net = lamina.Net.from_text(mlp_net(mnist, batch=10, shuffle=False), phase="train")
    assert net.phase == "train" and "accuracy" not in net.blobs
    labels = read_idx(os.path.join(mnist, "train-labels-idx1-ubyte"))
    net.forward()
    np.testing.assert_array_equal(net.blobs["label"].data, labels[:10])
    net.forward()
    np.testing.assert_array_equal(net.blobs["label"].data, labels[10:20])
    assert net.loss == pytest.approx(float(net.blobs["loss"].data), rel=0)
