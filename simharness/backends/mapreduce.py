"""`simharness.backends.mapreduce`: TFF's ``tff.backends.mapreduce`` names that run here.

Only the intrinsic TFF defines in this namespace is provided:
`federated_secure_modular_sum`. TFF's MapReduce / Broadcast /
DistributeAggregate forms and their compilers transform TFF's computation
protos and are left out (docs/tff/core.md).
"""

from simharness.core.intrinsics import federated_secure_modular_sum

__all__ = ['federated_secure_modular_sum']
