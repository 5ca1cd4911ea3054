"""Net.backward: the gradients of the loss with respect to an input blob and to every
parameter, against central differences of Net.forward's loss."""
import numpy as np
import pytest

import lamina

NET = """
force_backward: true
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 5 } shape { dim: 4 } } }
layer { name: "ip1" type: "Linear" bottom: "data" top: "ip1"
        inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "act" type: "TanH" bottom: "ip1" top: "act" }
layer { name: "ip2" type: "Linear" bottom: "act" top: "ip2"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""
EPS = 1e-2


@pytest.fixture
def net():
    net = lamina.Net.from_text(NET, seed=11)
    rng = np.random.default_rng(3)
    net.blobs["data"].data = rng.standard_normal((4, 5))
    net.blobs["label"].data = [0, 2, 1, 2]
    return net


def numerical_gradient(net, array):
    """Central differences of the loss over every element of `array` (a view into the net)."""
    gradient = np.zeros(array.shape)
    for i in np.ndindex(array.shape):
        kept = array[i]
        array[i] = kept + EPS
        up = net.forward()["loss"]
        array[i] = kept - EPS
        down = net.forward()["loss"]
        array[i] = kept
        gradient[i] = (float(up) - float(down)) / (2 * EPS)
    return gradient


def analytic(net):
    net.clear_param_diffs()
    net.forward()
    net.backward()


def test_input_gradient_matches_central_differences(net):
    analytic(net)
    computed = net.blobs["data"].diff.copy()
    expected = numerical_gradient(net, net.blobs["data"].data)
    np.testing.assert_allclose(computed, expected, rtol=2e-3, atol=2e-4)
    assert np.abs(expected).max() > 1e-2  # the check is not of zeros


@pytest.mark.parametrize("name", ["ip1/weight", "ip1/bias", "ip2/weight", "ip2/bias"])
def test_parameter_gradients_match_central_differences(net, name):
    analytic(net)
    computed = net.params[name].diff.copy()
    expected = numerical_gradient(net, net.params[name].data)
    np.testing.assert_allclose(computed, expected, rtol=2e-3, atol=2e-4)
    assert np.abs(expected).max() > 1e-2


def test_parameter_gradients_accumulate_until_cleared(net):
    analytic(net)
    once = net.params["ip2/weight"].diff.copy()
    net.backward()  # adds the same gradient again
    np.testing.assert_allclose(net.params["ip2/weight"].diff, 2 * once, rtol=1e-6)
    net.params["ip2/weight"].diff[...] = 1  # a written diff is added to as well
    net.backward()
    np.testing.assert_allclose(net.params["ip2/weight"].diff, 1 + once, rtol=1e-6)
    net.clear_param_diffs()
    assert not net.params["ip2/weight"].diff.any()
