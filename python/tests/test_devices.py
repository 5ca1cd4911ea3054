"""Device selection: what lamina.devices() lists, and nets and solvers on the CPU by name."""
import pytest

import lamina
from conftest import deploy_net


def test_devices_list_the_cpu_then_each_gpu():
    devices = lamina.devices()
    assert devices[0] == "cpu"
    assert devices[1:] == [f"cuda:{i}" for i in range(len(devices) - 1)]
    assert lamina.cuda_available() == (len(devices) > 1)
    if not lamina.cuda_compiled():
        assert not lamina.cuda_available()


def test_every_listed_device_builds_a_net():
    for device in lamina.devices():
        assert lamina.Net.from_text(deploy_net(), device=device).device == device


def test_cuda_names_device_zero():
    if not lamina.cuda_available():
        pytest.skip("no GPU: device 'cuda' is tested on a machine with one")
    assert lamina.Net.from_text(deploy_net(), device="cuda").device == "cuda:0"


def test_solver_device_overrides_the_solver_file(solver_file):
    assert lamina.Solver(solver_file, device="cpu").device == "cpu"


def test_version_and_log_level():
    assert lamina.__version__.count(".") == 2
    lamina.set_log_level("info")
    lamina.set_log_level("warning")
    with pytest.raises(ValueError, match="'loud'"):
        lamina.set_log_level("loud")
