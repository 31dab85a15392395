"""The local wing of the runtime: worker processes on this machine, pipes and shared memory.

- `shm`: shared-memory arenas (segments one process creates and others map).
- `transport`: frames and buffers through shared memory.
- `arenas`: the broadcast arena and response loans.
- `process`: supervision of a worker process (start, liveness, death).
- `handle`: requests to a worker (`WorkerHandle`, the seam's handle).
- `reactor`: the one I/O thread of a pool.
- `pool`: `WorkerPool` (the seam's group) and `build_pool`; `options`: `PoolOptions`, `WorkerConfig`.

The worker process itself is a host: `simharness.hosts.local_worker`.
"""
