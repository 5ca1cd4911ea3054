"""Weights files: Net.save / Net.load (Lamina's format and Caffe's), read_weights and
write_weights, and what is refused."""
import numpy as np
import pytest

import lamina
from conftest import deploy_net

INPUT = np.random.default_rng(4).random((5, 1, 28, 28), dtype=np.float32)


def test_lamina_file_round_trip(tmp_path):
    trained = lamina.Net.from_text(deploy_net(), seed=21)
    path = str(tmp_path / "w.lamina")
    trained.save(path)
    arrays = lamina.read_weights(path)
    assert list(arrays) == list(trained.params)
    for name, p in trained.params.items():
        np.testing.assert_array_equal(arrays[name], p.data)
    fresh = lamina.Net.from_text(deploy_net(), seed=22)
    assert fresh.load(path) == {"loaded": list(trained.params), "kept_filler": [], "ignored": []}
    np.testing.assert_array_equal(fresh.forward(data=INPUT)["prob"],
                                  trained.forward(data=INPUT)["prob"])
    loaded = lamina.Net.from_text(deploy_net(), weights=path)  # the constructor's argument
    np.testing.assert_array_equal(loaded.params["fc1/weight"].data,
                                  trained.params["fc1/weight"].data)


def test_write_weights_makes_a_file_the_net_loads(tmp_path):
    net = lamina.Net.from_text(deploy_net())
    arrays = {name: np.full(p.shape, 0.01 * i) for i, (name, p) in enumerate(net.params.items())}
    arrays["extra/array"] = np.ones(3)
    path = str(tmp_path / "made.lamina")
    lamina.write_weights(path, arrays)
    report = net.load(path)
    assert report["ignored"] == ["extra/array"]
    for name, p in net.params.items():
        np.testing.assert_allclose(p.data, arrays[name])
    with pytest.raises(lamina.Error, match="'extra/array'"):
        net.load(path, match="exact")


def test_caffe_model_round_trip(tmp_path):
    trained = lamina.Net.from_text(deploy_net(), seed=31)
    path = str(tmp_path / "w.caffemodel")
    trained.save(path)
    arrays = lamina.read_weights(path)
    assert sorted(arrays) == ["fc1/0", "fc1/1", "fc2/0", "fc2/1"]
    np.testing.assert_array_equal(arrays["fc2/0"], trained.params["fc2/weight"].data)
    fresh = lamina.Net.from_text(deploy_net(), seed=32)
    fresh.load(path)
    np.testing.assert_array_equal(fresh.forward(data=INPUT)["prob"],
                                  trained.forward(data=INPUT)["prob"])


def test_fine_tune_keeps_fillers_of_what_the_file_lacks(tmp_path):
    net = lamina.Net.from_text(deploy_net(), seed=41)
    kept = net.params["fc2/weight"].data.copy()
    path = str(tmp_path / "part.lamina")
    lamina.write_weights(path, {"fc1/weight": np.zeros((64, 784)), "fc1/bias": np.zeros(64)})
    with pytest.raises(lamina.Error, match="fc2/weight"):
        net.load(path)  # match="all": every parameter must be there
    report = net.load(path, match="fine_tune")
    assert report["kept_filler"] == ["fc2/weight", "fc2/bias"]
    assert not net.params["fc1/weight"].data.any()
    np.testing.assert_array_equal(net.params["fc2/weight"].data, kept)


def test_a_file_for_another_net_is_refused(tmp_path):
    path = str(tmp_path / "other.lamina")
    lamina.write_weights(path, {"conv1/weight": np.zeros((2, 2))})
    net = lamina.Net.from_text(deploy_net())
    with pytest.raises(lamina.Error, match="conv1/weight.*fc1/weight|fc1/weight.*conv1/weight"):
        net.load(path, match="fine_tune")
    report = net.load(path, match="fine_tune", allow_unmatched=True)
    assert report["ignored"] == ["conv1/weight"] and report["loaded"] == []


def test_damaged_files_are_errors_naming_them(tmp_path):
    path = tmp_path / "cut.lamina"
    lamina.Net.from_text(deploy_net()).save(str(path))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(lamina.Error, match="cut.lamina"):
        lamina.read_weights(str(path))
    with pytest.raises(lamina.Error, match="missing.lamina"):
        lamina.read_weights(str(tmp_path / "missing.lamina"))
    with pytest.raises(TypeError, match="weights 'w' takes numbers .*dtype object"):
        lamina.write_weights(str(tmp_path / "x.lamina"), {"w": object()})
