"""Lamina's nets and solvers from Python (docs/python.md).

    import lamina
    net = lamina.Net("models/mnist/mlp_deploy.prototxt", "mlp.lamina",
                     input_shapes={"data": (64, 1, 28, 28)})
    probabilities = net.forward(data=images)["prob"]          # (64, 10)

    solver = lamina.Solver("models/mnist/mlp_solver.prototxt", device="cuda:0")
    solver.on_display = lambda s, iteration, loss, lr: print(iteration, loss)
    solver.step(1000)

Net(model, weights=None, *, phase, device, stages, level, input_shapes, seed) builds a net
from a prototxt; its blobs and params are NumPy views on the CPU (no copy) and read-only
copies on a GPU. Solver(solver_file, *, device, weights, snapshot_prefix) trains, snapshots
and restores, calling Python at display, test and snapshot points. Lamina's errors arrive as
lamina.Error (a RuntimeError) with Lamina's message.
"""
from ._lamina import (Blob, Error, Net, Param, Solver, __version__, cuda_available,
                      cuda_compiled, device_query, devices, read_weights, set_log_level,
                      write_weights)

__all__ = ["__version__", "Blob", "Error", "Net", "Param", "Solver", "cuda_available", "cuda_compiled",
           "device_query", "devices", "read_weights", "set_log_level", "write_weights"]

for _name in ("Blob", "Error", "Net", "Param", "Solver"):  # lamina.Net in messages, not _lamina
    globals()[_name].__module__ = __name__
