"""The context current while a JAX computation is traced (TFF's ``JaxComputationContext``).

JAX code cannot call other computations: a `tff.jax.computation` is traced by JAX into
one XLA module, and a TFF computation called from inside it has nothing to run on.
TFF installs this context for the trace so that such a call fails with a clear error;
so does simharness.
"""

from __future__ import annotations

from typing import Optional

from simharness.core.context_stack import SyncContext

__all__ = ['JaxComputationContext']

_UNSUPPORTED = 'Invoking computations from JAX code is not currently supported.'


class JaxComputationContext(SyncContext):
    """An experimental context for building JAX computations (TFF's)."""

    def ingest(self, val: object, type_spec: Optional[object]) -> object:
        raise NotImplementedError(_UNSUPPORTED)

    def invoke(self, comp: object, arg: object) -> object:
        raise NotImplementedError(_UNSUPPORTED)
