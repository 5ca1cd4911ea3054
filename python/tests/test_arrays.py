"""Blobs and parameters as NumPy arrays: views of the net's memory on the CPU (no copy),
assignment with shape and dtype checks."""
import gc

import numpy as np
import pytest

import lamina
from conftest import deploy_net


def address(array):
    return array.__array_interface__["data"][0]


@pytest.fixture
def net():
    return lamina.Net.from_text(deploy_net(batch=3), seed=5)


def test_blob_data_is_a_view_of_the_net(net):
    first, second = net.blobs["data"].data, net.blobs["data"].data
    assert address(first) == address(second)  # the same memory, not two copies
    assert first.dtype == np.float32 and first.flags.writeable and first.shape == (3, 1, 28, 28)
    first[...] = np.random.default_rng(1).random(first.shape)
    out = net.forward()["prob"]  # no inputs: the forward pass reads what the view wrote
    expected = net.forward(data=np.array(first))["prob"]
    np.testing.assert_array_equal(out, expected)


def test_writing_a_parameter_view_changes_the_net(net):
    for name in ("fc2/weight", "fc2/bias"):
        net.params[name].data[...] = 0  # every score 0: uniform probabilities
    prob = net.forward(data=np.ones((3, 1, 28, 28)))["prob"]
    np.testing.assert_allclose(prob, np.full((3, 10), 0.1), rtol=1e-6)
    view = net.params["fc2/bias"].data
    view[3] = 50  # class 3 wins
    assert np.all(net.forward()["prob"].argmax(axis=1) == 3)
    assert address(view) == address(net.params["fc2/bias"].data)


def test_views_of_blobs_alias_as_the_net_shares_memory(net):
    # ReLU runs in place: fc1 and its ReLU's top are one blob.
    net.forward(data=np.random.default_rng(2).standard_normal((3, 1, 28, 28)))
    assert np.all(net.blobs["fc1"].data >= 0)


def test_a_view_keeps_the_net_alive():
    net = lamina.Net.from_text(deploy_net(batch=1))
    weights = net.params["fc1/weight"].data
    expected = weights.copy()
    del net
    gc.collect()
    np.testing.assert_array_equal(weights, expected)  # still the net's memory, still there


def test_assignment_copies_in_and_checks(net):
    blob = net.blobs["data"]
    blob.data = np.full((3, 1, 28, 28), 2, dtype=np.int64)  # integers convert
    assert np.all(blob.data == 2)
    net.params["fc1/bias"].data = np.arange(64, dtype=np.float64)
    np.testing.assert_array_equal(net.params["fc1/bias"].data, np.arange(64))
    with pytest.raises(ValueError, match=r"blob 'data' has shape \(3, 1, 28, 28\); got an array "
                                         r"of shape \(3, 784\)"):
        blob.data = np.zeros((3, 784))
    with pytest.raises(TypeError, match="blob 'data' takes numbers .*dtype complex128"):
        blob.data = np.zeros((3, 1, 28, 28), dtype=np.complex128)
    with pytest.raises(TypeError, match="parameter 'fc1/bias' takes numbers .*dtype <U1"):
        net.params["fc1/bias"].data = np.array(["x"] * 64)
    with pytest.raises(ValueError, match=r"input 'data' has shape \(3, 1, 28, 28\); got an array "
                                         r"of shape \(2, 1, 28, 28\)"):
        net.forward(data=np.zeros((2, 1, 28, 28)))


def test_param_table(net):
    assert list(net.params) == ["fc1/weight", "fc1/bias", "fc2/weight", "fc2/bias"]
    weight = net.params["fc1/weight"]
    assert weight.shape == (64, 784) and weight.count == 64 * 784 and weight.layer == "fc1"
    assert weight.lr_mult == 1 and weight.decay_mult == 1
    assert repr(weight) == "<lamina.Param 'fc1/weight' (64, 784) on cpu>"
    assert repr(net.blobs["prob"]) == "<lamina.Blob 'prob' (3, 10) on cpu>"
    assert net.blobs["prob"].storage == "float32"
