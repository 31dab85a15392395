"""Hosts: the places a worker's leaf executor is built (above `executors/` and `runtime/`).

A worker is a transport (`simharness.runtime`) around a `WorkerService`
around a leaf executor (`simharness.executors.leaf.eager_tf`). The modules here
put the three together, so that neither `runtime/` nor `executors/` imports
the other's insides:

- `leaf`: the worker's `WorkerService` over an `EagerTFExecutor`.
- `local_worker`: the worker process of the local pool (`worker_main`) and
  `create_worker_pool`, a pool whose workers run it.
- `grpc_service`: the gRPC executor service (`simharness serve`).
- `ray_actor`: the Ray actor (`RayWorker`), which `RayWorkers` (`runtime.ray`) are
  given as their ``actor``.
"""
