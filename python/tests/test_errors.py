"""Lamina's errors arrive as lamina.Error (a RuntimeError) with Lamina's message; mistakes
in the arguments are Python's own ValueError and TypeError."""
import numpy as np
import pytest

import lamina
from conftest import deploy_net


def test_error_is_a_runtime_error():
    assert issubclass(lamina.Error, RuntimeError)


def test_a_bad_prototxt_names_file_line_and_column(tmp_path):
    model = tmp_path / "bad.prototxt"
    model.write_text('name: "x"\nlayer { name: "a" type: "Linear" bogus: 1 }\n')
    with pytest.raises(lamina.Error, match=r"bad\.prototxt:2:\d+.*bogus"):
        lamina.Net(str(model))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(lamina.Error, match="nowhere.prototxt"):
        lamina.Net(str(tmp_path / "nowhere.prototxt"))
    with pytest.raises(lamina.Error, match="nowhere_solver.prototxt"):
        lamina.Solver(str(tmp_path / "nowhere_solver.prototxt"))


def test_an_unknown_layer_type_is_named():
    text = deploy_net().replace('type: "ReLU"', 'type: "Relu"')
    with pytest.raises(lamina.Error, match="Relu"):
        lamina.Net.from_text(text)


def test_unknown_blob_lists_the_blobs():
    net = lamina.Net.from_text(deploy_net())
    with pytest.raises(lamina.Error, match="has no blob 'image'; its blobs: .*data"):
        net.blob("image")
    with pytest.raises(lamina.Error, match="has no blob 'image'"):
        net.forward(image=np.zeros(3))
    with pytest.raises(KeyError):
        net.blobs["image"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="phase must be 'train' or 'test'; got 'eval'"):
        lamina.Net.from_text(deploy_net(), phase="eval")
    with pytest.raises(lamina.Error, match="'gpu0'"):
        lamina.Net.from_text(deploy_net(), device="gpu0")
    net = lamina.Net.from_text(deploy_net())
    with pytest.raises(ValueError, match="match must be 'all'.*got 'some'"):
        net.load("x.lamina", match="some")
    with pytest.raises(TypeError):
        lamina.Net.from_text(deploy_net(), "w.lamina", "test")  # phase is keyword-only


def test_missing_gpu_says_what_was_found():
    if lamina.cuda_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(lamina.Error) as caught:
        lamina.Net.from_text(deploy_net(), device="cuda:0")
    assert "cpu" in str(caught.value).lower() or "CUDA" in str(caught.value)


def test_errors_while_running_are_lamina_errors(tmp_path):
    text = """
layer { name: "mnist" type: "MnistData" top: "data" top: "label"
        mnist_data_param { images: "/nonexistent/images" labels: "/nonexistent/labels"
                           batch_size: 2 } }
"""
    with pytest.raises(lamina.Error, match="/nonexistent/images"):
        lamina.Net.from_text(text)
