"""`simharness.backends`: TFF's ``tff.backends`` namespace.

`native` and `test` set or create execution contexts with TFF's names,
signatures and defaults, on simharness's stacks (docs/tff/core.md tells which
stack each maps to and why); `mapreduce` holds the MapReduce-form intrinsic
`federated_secure_modular_sum`.
"""

from simharness.backends import mapreduce, native, test

__all__ = ['mapreduce', 'native', 'test']
