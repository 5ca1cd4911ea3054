"""Solver callbacks: called at the display, test, snapshot and iteration points with the
solver's values; an exception raised in one stops training and propagates as itself."""
import os
import signal
import threading

import pytest

import lamina
from conftest import write_solver


class Stop(Exception):
    pass


@pytest.fixture
def solver(tmp_path, mnist):
    return lamina.Solver(write_solver(tmp_path, mnist, max_iter=100, display=20,
                                      test_interval=50, test_iter=3,
                                      lr_policy='lr_policy: "step"\ngamma: 0.5\nstepsize: 30',
                                      extra="snapshot: 50"))


def record(solver, name):
    calls = []
    setattr(solver, name, lambda *args: calls.append(args))
    return calls


def test_display_points_carry_the_displayed_loss_and_rate(solver):
    calls = record(solver, "on_display")
    solver.step(100)
    assert all(s is solver for s, *_ in calls)
    assert [(it, loss) for _, it, loss, _ in calls] == solver.loss_history
    # Iterations counted from 0, displayed before their update (as Caffe's), with the rate of
    # that update under the step policy: 0.05 * 0.5^floor(iteration / 30).
    assert [it for _, it, _, _ in calls] == [0, 20, 40, 60, 80]
    assert [lr for *_, lr in calls] == pytest.approx(
        [0.05 * 0.5 ** (it // 30) for it in (0, 20, 40, 60, 80)], rel=1e-6)


def test_test_points_carry_the_test_outputs(solver):
    calls = record(solver, "on_test")
    solver.step(100)
    assert [c[1:] for c in calls] == [tuple(entry) for entry in solver.test_history]
    # test_initialization, then at each 50 before the iteration; solve() tests at the end.
    assert [it for _, it, _, _ in calls] == [0, 50]
    assert all(0 <= outputs["accuracy"] <= 1 for *_, outputs in calls)


def test_snapshot_points_name_files_that_exist(solver):
    seen = []
    solver.on_snapshot = lambda s, it, weights, state: seen.append(
        (it, os.path.exists(weights), os.path.exists(state), os.path.basename(state)))
    solver.step(100)
    assert seen == [(50, True, True, "mlp_iter_50.solverstate"),
                    (100, True, True, "mlp_iter_100.solverstate")]
    solver.snapshot()  # asked for: the same callback
    assert len(seen) == 3


def test_every_iteration_is_seen(solver):
    calls = record(solver, "on_iteration")
    solver.step(7)
    assert [it for _, it in calls] == list(range(1, 8))
    solver.on_iteration = None  # no longer called
    solver.step(3)
    assert len(calls) == 7 and solver.iter == 10


@pytest.mark.parametrize("point, stop_at", [("on_display", 40), ("on_iteration", 33),
                                            ("on_test", 50)])
def test_an_exception_in_a_callback_stops_training_and_propagates(solver, point, stop_at):
    raised = Stop("enough")

    def callback(s, iteration, *_):
        if iteration == stop_at:
            raise raised

    setattr(solver, point, callback)
    with pytest.raises(Stop) as caught:
        solver.step(100)
    assert caught.value is raised
    # on_iteration runs after its iteration (solver.iter counts it); an exception at a display
    # point waits for that iteration to complete; a test point comes before its iteration.
    stopped = stop_at + (1 if point == "on_display" else 0)
    assert solver.iter == stopped
    setattr(solver, point, None)
    solver.step(5)  # the solver trains on
    assert solver.iter == stopped + 5


def test_callbacks_must_be_callable(solver):
    with pytest.raises(TypeError, match="on_display must be a callable or None"):
        solver.on_display = 3


def test_ctrl_c_stops_training_with_a_snapshot(tmp_path, mnist):
    solver = lamina.Solver(write_solver(tmp_path, mnist, max_iter=10**7, display=0,
                                        test_interval=10**7))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        solver.solve()
    timer.join()
    assert 0 < solver.iter < 10**7
    assert os.path.exists(f"{solver.snapshot_prefix}_iter_{solver.iter}.solverstate")
