"""Runtime primitives: shared-memory arenas, worker pinning, resource discovery.

Nothing here imports `simharness.executors` or TensorFlow at import time.
"""
