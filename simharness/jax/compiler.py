"""TFF's XLA computation factory (``xla_backend/compiler.py``): constants as JAX
computations.

TFF's compiler asks a "local computation factory" for the small computations it
generates (a zero of a type); TFF's XLA backend built them with ``xla_client``'s
builder. Here they are traced by JAX and serialized as any `tff.jax.computation`.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from simharness.core import building_blocks as bb
from simharness.core import types as T
from simharness.errors import SimharnessValueError
from simharness.jax.jax_serialization import serialize_jax_computation

__all__ = ['XlaComputationFactory']


class XlaComputationFactory:
    """Makes XLA computations (TFF's ``LocalComputationFactory`` for the XLA backend)."""

    def create_constant_from_scalar(
        self, value: object, type_spec: T.Type
    ) -> Tuple[bb.CompiledComputation, T.FunctionType]:
        """A no-parameter computation giving `value` in every element of `type_spec`.

        Args:
          value: a scalar, broadcast to every tensor of `type_spec`.
          type_spec: a tensor type or a structure of tensor types, fully defined.

        Returns:
          The computation and its type, ``( -> type_spec)``.

        Raises:
          ValueError: `type_spec` holds more than tensors and structures.
        """
        if not isinstance(type_spec, T.Type) or not T.contains_only_tensors(type_spec):
            raise SimharnessValueError(f'Not a tensor or a structure of tensors: {type_spec}')
        if not all(
            isinstance(t, T.TensorType) and t.is_fully_defined for t in T.flatten_type(type_spec)
        ):
            raise SimharnessValueError(f'Expected the shapes to be fully defined, got {type_spec}')

        def constants(t: T.Type) -> object:
            if isinstance(t, T.StructType):
                return [constants(e) for e in t]
            assert isinstance(t, T.TensorType)
            shape = tuple(int(d) for d in t.shape or () if d is not None)  # fully defined
            return np.full(shape, value, dtype=t.dtype)

        leaves = constants(type_spec)
        comp, _ = serialize_jax_computation(lambda: leaves, None)
        comp_type = T.FunctionType(None, type_spec)
        return bb.CompiledComputation(comp.graph, comp_type, 'constant'), comp_type
