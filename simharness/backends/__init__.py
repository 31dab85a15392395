"""`simharness.backends`: TFF's ``tff.backends`` namespace.

`native` and `test` set or create execution contexts with TFF's names,
signatures and defaults, on simharness's stacks (docs/tff/core.md tells which
stack each maps to and why); `reference` is TFF v0.19's (2021) reference
context, the local thread stack here; `mapreduce` holds the MapReduce-form intrinsic
`federated_secure_modular_sum`; `xla` the contexts TFF made for JAX computations.
"""

from simharness.backends import mapreduce, native, reference, test, xla

__all__ = ['mapreduce', 'native', 'reference', 'test', 'xla']
