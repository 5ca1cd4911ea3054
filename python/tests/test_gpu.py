"""The module on a GPU (device "cuda:0"): the same results as the CPU, copies instead of
views, training, exact resuming and callbacks. Skips, saying so, without a GPU."""
import numpy as np
import pytest

import lamina
from conftest import deploy_net, write_solver
from test_gradients import NET as GRADIENT_NET

pytestmark = pytest.mark.skipif(not lamina.cuda_available(),
                                reason="no GPU (lamina.cuda_available() is False): the GPU "
                                       "tests run on a machine with one")
INPUT = np.random.default_rng(6).random((5, 1, 28, 28), dtype=np.float32)


def test_forward_matches_the_cpu():
    cpu = lamina.Net.from_text(deploy_net(), seed=9)
    gpu = lamina.Net.from_text(deploy_net(), seed=9, device="cuda:0")
    assert gpu.device == "cuda:0"
    np.testing.assert_array_equal(gpu.params["fc1/weight"].data, cpu.params["fc1/weight"].data)
    np.testing.assert_allclose(gpu.forward(data=INPUT)["prob"], cpu.forward(data=INPUT)["prob"],
                               rtol=1e-5, atol=1e-7)


def test_device_arrays_are_read_only_copies_and_assignment_writes():
    net = lamina.Net.from_text(deploy_net(), device="cuda:0")
    data = net.blobs["data"].data
    assert not data.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        data[...] = 1
    net.blobs["data"].data = INPUT
    np.testing.assert_array_equal(net.blobs["data"].data, INPUT)
    net.params["fc2/weight"].data = np.zeros((10, 64))
    net.params["fc2/bias"].data = np.eye(10)[4] * 50
    assert np.all(net.forward()["prob"].argmax(axis=1) == 4)


def test_gradients_match_the_cpu():
    grads = []
    for device in ("cpu", "cuda:0"):
        net = lamina.Net.from_text(GRADIENT_NET, seed=11, device=device)
        net.blobs["data"].data = np.random.default_rng(3).standard_normal((4, 5))
        net.blobs["label"].data = [0, 2, 1, 2]
        net.clear_param_diffs()
        net.forward()
        net.backward()
        grads.append([net.blobs["data"].diff] + [p.diff for p in net.params.values()])
    for cpu, gpu in zip(*grads):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-6)


def test_training_on_the_gpu(tmp_path, mnist):
    solver = lamina.Solver(write_solver(tmp_path, mnist), device="cuda:0")
    displays = []
    solver.on_display = lambda s, it, loss, lr: displays.append(it)
    solver.solve()
    assert solver.device == "cuda:0" and displays == list(range(0, 200, 20))
    losses = [loss for _, loss in solver.loss_history]
    assert losses[-1] < 0.5 * losses[0]
    assert solver.test()["accuracy"] > 0.85


def test_resuming_on_the_gpu_is_exact(tmp_path, mnist):
    path = write_solver(tmp_path, mnist, max_iter=60, display=10, test_interval=1000)
    whole = lamina.Solver(path, device="cuda:0")
    whole.step(60)
    first = lamina.Solver(path, device="cuda:0", snapshot_prefix=str(tmp_path / "half"))
    first.step(30)
    _, state = first.snapshot()
    resumed = lamina.Solver(path, device="cuda:0", snapshot_prefix=str(tmp_path / "resumed"))
    resumed.restore(state)
    resumed.step(30)
    for name, p in whole.net.params.items():
        np.testing.assert_array_equal(resumed.net.params[name].data, p.data, err_msg=name)
