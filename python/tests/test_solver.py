"""lamina.Solver: training reduces the loss and reaches an accuracy, snapshots resume
exactly, fine-tuning starts from given weights."""
import os

import numpy as np

import lamina
from conftest import write_solver


def weights_of(solver):
    return {name: p.data.copy() for name, p in solver.net.params.items()}


def test_training_reduces_the_loss_and_reaches_an_accuracy(solver_file):
    solver = lamina.Solver(solver_file)
    assert solver.device == "cpu" and solver.iter == 0 and solver.max_iter == 200
    solver.solve()
    assert solver.iter == 200
    losses = [loss for _, loss in solver.loss_history]
    assert [it for it, _ in solver.loss_history] == list(range(0, 200, 20))  # Caffe's: before
    assert losses[-1] < 0.5 * losses[0], losses
    accuracy = solver.test()["accuracy"]
    assert accuracy > 0.85  # 2000 images seen about 6 times: 784-64-10 reaches ~0.9
    iteration, net_index, outputs = solver.test_history[-1]
    assert (iteration, net_index) == (200, 0) and outputs["accuracy"] == accuracy
    assert os.path.exists(solver.snapshot_prefix + "_iter_200.lamina")  # snapshot_after_train


def test_snapshot_and_restore_continue_exactly(tmp_path, mnist):
    path = write_solver(tmp_path, mnist, max_iter=60, display=10, test_interval=1000)
    uninterrupted = lamina.Solver(path)
    uninterrupted.step(60)

    first = lamina.Solver(path, snapshot_prefix=str(tmp_path / "half"))
    first.step(30)
    weights_path, state_path = first.snapshot()
    assert weights_path.endswith("half_iter_30.lamina") and state_path.endswith("_30.solverstate")
    resumed = lamina.Solver(path, snapshot_prefix=str(tmp_path / "resumed"))
    resumed.restore(state_path)
    assert resumed.iter == 30
    resumed.step(30)
    for name, values in weights_of(uninterrupted).items():
        np.testing.assert_array_equal(weights_of(resumed)[name], values, err_msg=name)
    assert resumed.loss_history == [r for r in uninterrupted.loss_history if r[0] >= 30]


def test_fine_tuning_starts_from_the_weights(tmp_path, mnist):
    path = write_solver(tmp_path, mnist, max_iter=10)
    trained = lamina.Solver(path, snapshot_prefix=str(tmp_path / "t"))
    trained.step(10)
    weights, _ = trained.snapshot()
    tuned = lamina.Solver(path, weights=weights, snapshot_prefix=str(tmp_path / "u"))
    for name, values in weights_of(trained).items():
        np.testing.assert_array_equal(weights_of(tuned)[name], values)
    assert tuned.iter == 0


def test_solver_nets_are_the_trained_weights(solver_file):
    solver = lamina.Solver(solver_file)
    test_net = solver.test_nets[0]
    assert [net.phase for net in [solver.net] + solver.test_nets] == ["train", "test"]
    solver.net.params["fc2/bias"].data[...] = 7  # the test net shares the arena
    np.testing.assert_array_equal(test_net.params["fc2/bias"].data, np.full(10, 7))
    solver.step(1)
    assert not np.array_equal(test_net.params["fc2/bias"].data, np.full(10, 7))


def test_the_solvers_net_outlives_the_name(solver_file):
    net = lamina.Solver(solver_file).net  # the net keeps its solver alive
    assert net.forward()["loss"] > 0
