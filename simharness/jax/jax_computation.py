"""`tff.jax.computation`: Python functions of JAX code as computations (TFF's).

Used as `tff.tensorflow.computation` is: with parameter types (TFF types, numpy dtypes,
`jax.ShapeDtypeStruct`s, or containers of these) it traces the function at once into a
`ConcreteComputation`; without, it gives a `PolymorphicComputation` traced per argument
type. The function must be JAX code that `jax.jit` can compile; its parameters and
results are tensors or (nested) structures of tensors, of fully defined shapes.

```python
@tff.jax.computation(np.int32, np.int32)
def add(a, b):
    return a + b            # add.type_signature: (<a=int32,b=int32> -> int32)
```

As in TFF, 64-bit dtypes need ``jax.config.update('jax_enable_x64', True)`` and strings
are refused (`ValueError`).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import jax
import numpy as np

from simharness.core import computation as _computation
from simharness.core import types as T
from simharness.core.computation import ConcreteComputation
from simharness.jax.jax_serialization import serialize_jax_computation

__all__ = ['jax_computation']

_X64 = (np.int64, np.uint64, np.float64, np.complex128)


def _contains_dtype(type_spec: T.Type, dtypes: Union[type, Sequence[type]]) -> bool:
    wanted = tuple(dtypes) if isinstance(dtypes, (list, tuple)) else (dtypes,)
    return any(
        isinstance(t, T.TensorType) and np.dtype(t.dtype).type in wanted
        for t in T.flatten_type(type_spec)
    )


def _jax_wrapper_fn(
    fn: Callable[..., object],
    parameter_type: Optional[T.Type],
    unpack: bool,
    vectorize: bool = False,
) -> ConcreteComputation:
    name = getattr(fn, '__name__', '')
    if parameter_type is not None:
        if _contains_dtype(parameter_type, (np.str_, np.bytes_, np.object_)):
            raise ValueError(f'JAX does not support `np.str_` dtypes, found: {parameter_type}.')
        if not jax.config.read('jax_enable_x64') and _contains_dtype(parameter_type, _X64):
            raise ValueError(
                'Using x64-precision numbers in JAX is not enabled and found an x64 dtype. To '
                'use x64-precision numbers in JAX, you must set the `jax_enable_x64` '
                'configuration variable. See '
                'https://jax.readthedocs.io/en/latest/notebooks/Common_Gotchas_in_JAX.html'
                f'#double-64bit-precision for more information.\nFound: {parameter_type}'
            )
    comp, _ = serialize_jax_computation(
        fn, parameter_type, unpack=unpack, name=name, vectorize=vectorize
    )
    return ConcreteComputation(comp, name)


def _vectorized_wrapper_fn(
    fn: Callable[..., object], parameter_type: Optional[T.Type], unpack: bool
) -> ConcreteComputation:
    return _jax_wrapper_fn(fn, parameter_type, unpack, vectorize=True)


def _spec(x: object) -> object:
    """`x` with its `jax.ShapeDtypeStruct`s as tensor types (in containers too)."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return T.TensorType(np.dtype(x.dtype), tuple(x.shape))
    if isinstance(x, dict):
        return type(x)((k, _spec(v)) for k, v in x.items())
    if isinstance(x, tuple) and T.is_namedtuple(x):
        make: Callable[..., object] = type(x)
        return make(*[_spec(v) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_spec(v) for v in x)
    return x


_decorate = _computation._decorator(_jax_wrapper_fn, 'jax_computation')
_decorate_vectorized = _computation._decorator(_vectorized_wrapper_fn, 'jax_computation')


def jax_computation(*args: object, vectorize: bool = False, **options: object) -> object:
    """Decorates/wraps Python functions containing JAX code as computations (TFF's
    ``tff.jax.computation``).

    ``@jax_computation`` and ``@jax_computation()`` make a polymorphic computation;
    ``@jax_computation(spec, ...)`` (TFF types, dtypes, `jax.ShapeDtypeStruct`s or
    containers of these) a concrete one; ``jax_computation(fn, spec, ...)`` wraps `fn`.

    Args:
      *args: the function and/or the parameter specs, as above.
      vectorize: (simharness's) also export the function mapped over a block of clients
        (`jax.vmap`): a `federated_map` of it runs each block of clients an executor
        holds (a worker's, cut by ``clients_per_worker``) as one vmapped call instead of
        one call per client. The results equal the sequential ones up to the last bits;
        see docs/tff/jax.md.
      **options: none is accepted (a `TypeError` names the first).
    """
    if not isinstance(vectorize, bool):
        raise TypeError(f'vectorize must be a bool, got {vectorize!r}')
    decorate = _decorate_vectorized if vectorize else _decorate
    return decorate(*[_spec(a) for a in args], **options)
