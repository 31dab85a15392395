"""The runtime: how the driver reaches its workers (no executor is imported here).

Shared by every transport: `protocol` (requests and responses), `codec` (their
bytes), `service` (`WorkerService`: the worker role as a state machine),
`seam` (the `Protocol`s a transport implements), `inflight`, `shm`, `pinning`,
`resources`, `datasets`, `exits`. The wings, one per transport: `local/` (worker
processes, pipes and shared memory), `grpc/` (executor services), `ray/` (Ray
actors), and `loopback` (in-process, for tests). What builds a worker's leaf
executor (the worker process's main, the gRPC service, the Ray actor) lives
above, in `simharness.hosts`.
"""
