"""What the pytest plugin (`simharness.pytest_plugin`) is made of, by job.

- `registry`: stack names, the stack registry of a session, its warm pools,
  and `SimharnessStack` (what the `simharness_stack` fixture gives).
- `benchmark`: `SimharnessBenchmark` and the turn taking of interleaved sessions.

The plugin module itself holds the hooks and fixtures only.
"""
