"""Computations and the `tf_computation` / `federated_computation` decorators.

A `ConcreteComputation` wraps one building block (a `CompiledComputation`
or a `Lambda`) with its `type_signature`. A `PolymorphicComputation` (no
parameter spec given) traces a concrete one per argument type on call, as
TFF does. Calling a computation inside a federated computation's tracing
adds a call to the traced body; calling it elsewhere runs it in the current
execution context.
"""

from __future__ import annotations

import collections
import functools
import inspect
import sys
import threading
from typing import Any, Callable, List, Optional, cast

import attrs

from simharness.core import building_blocks as bb
from simharness.core import context_stack
from simharness.core import tracing
from simharness.core import types as T
from simharness.core.structure import Struct, call_unpacked
from simharness.core.xla import check_jit_compile, with_jit_compile
from simharness.errors import NoTypeSignatureError, SimharnessTypeError


class Computation(tracing.Traceable):
    """Base class of computations: callable, nestable, typed."""

    name: str = ''

    @property
    def type_signature(self) -> T.FunctionType:
        raise NotImplementedError  # abstract; both subclasses override

    def to_building_block(self, param_hint: Optional[T.Type] = None) -> bb.ComputationBuildingBlock:
        raise NotImplementedError  # abstract; both subclasses override

    #: For a `tf_computation`: its Python function, which a call made while another
    #: TF function is traced runs inline (TFF inlines a TF computation's graph there).
    _inline_tf: Optional[Callable[..., Any]] = None

    def run_inline_in_tf(self, fn: Callable[..., Any]) -> None:
        """Makes a call of this computation made while another TF function is traced run
        `fn` (its Python function) inline: how a `tf_computation` is inlined there."""
        self._inline_tf = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._inline_tf is not None and _inside_tf_function():
            return self._inline_tf(*args, **kwargs)
        if tracing.is_tracing() or _has_traced_value(args, kwargs):
            return self._trace_call(args, kwargs)
        concrete = self._concrete_for_call(args, kwargs)
        arg = _pack_python_args(concrete.type_signature.parameter, args, kwargs)
        return context_stack.get_context().invoke(concrete, arg)

    def _concrete_for_call(self, args, kwargs) -> 'ConcreteComputation':
        return self  # type: ignore[return-value]

    def _trace_call(self, args, kwargs) -> tracing.Value:
        concrete = self._concrete_for_trace(args, kwargs)
        ft = concrete.type_signature
        arg = tracing.pack_args(ft.parameter, args, kwargs)
        return tracing.Value(
            tracing.current_scope().bind(bb.Call(concrete.to_building_block(), arg))
        )

    def _concrete_for_trace(self, args, kwargs) -> 'ConcreteComputation':
        return self  # type: ignore[return-value]


def _has_traced_value(args, kwargs) -> bool:
    return any(isinstance(a, tracing.Value) for a in list(args) + list(kwargs.values()))


def _pack_python_args(param: Optional[T.Type], args: tuple, kwargs: dict) -> Any:
    if param is None:
        if args or kwargs:
            raise SimharnessTypeError(
                f'this computation takes no argument, got {len(args) + len(kwargs)}'
            )
        return None
    if len(args) == 1 and not kwargs:
        return args[0]
    if not args and not kwargs:
        raise SimharnessTypeError(f'this computation needs an argument of type {param}')
    if not isinstance(param, T.StructType):
        raise SimharnessTypeError(
            f'expected one argument of type {param}, got {len(args) + len(kwargs)}'
        )
    if kwargs:
        names = param.names
        items = list(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise SimharnessTypeError(f'unexpected keyword argument {k!r} for {param}')
            items.append((k, v))
        order = {n: i for i, n in enumerate(names)}
        items.sort(key=lambda kv: order[kv[0]])
        return Struct(items)
    return list(args)


def _inside_tf_function() -> bool:
    """Whether a TF graph is being built now (a `tf_computation` or a `tf.function` traced).

    TensorFlow is looked up, not imported: no graph is built before it is.
    """
    tf = sys.modules.get('tensorflow')
    return tf is not None and not tf.executing_eagerly()


class ConcreteComputation(Computation):
    """A computation with a fixed type signature."""

    def __init__(self, comp: bb.ComputationBuildingBlock, name: str = ''):
        if not isinstance(comp.type_signature, T.FunctionType):
            raise SimharnessTypeError(
                f'a computation must be a function, got {comp.type_signature}'
            )
        self._comp = comp
        self.name = name

    @property
    def type_signature(self) -> T.FunctionType:
        return cast(T.FunctionType, self._comp.type_signature)  # checked in __init__

    def to_building_block(self, param_hint: Optional[T.Type] = None) -> bb.ComputationBuildingBlock:
        return self._comp

    def __repr__(self) -> str:
        return f'<Computation {self.name or "?"}: {self.type_signature}>'


class PolymorphicComputation(Computation):
    """A computation traced per parameter type on first use with that type."""

    def __init__(self, make: Callable[[Optional[T.Type]], ConcreteComputation], name: str = ''):
        self._make = make
        self._cache: 'collections.OrderedDict[T.Type, ConcreteComputation]' = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self.name = name

    @property
    def type_signature(self) -> T.FunctionType:
        raise NoTypeSignatureError(
            f'computation {self.name!r} is polymorphic: it has no type signature until called '
            'with an argument (or give parameter specs to the decorator)'
        )

    def concrete(self, param_type: T.Type) -> ConcreteComputation:
        with self._lock:
            c = self._cache.get(param_type)
            if c is None:
                c = self._make(param_type)
                self._cache[param_type] = c
                while len(self._cache) > 64:
                    self._cache.popitem(last=False)
            return c

    def to_building_block(self, param_hint: Optional[T.Type] = None) -> bb.ComputationBuildingBlock:
        if param_hint is None:
            raise SimharnessTypeError(
                f'polymorphic computation {self.name!r} needs an argument '
                'type before it can be used here'
            )
        return self.concrete(param_hint).to_building_block()

    def _concrete_for_call(self, args, kwargs) -> ConcreteComputation:
        if not args and not kwargs:
            raise SimharnessTypeError(f'polymorphic computation {self.name!r} needs an argument')
        if kwargs:
            raise SimharnessTypeError('polymorphic computations take positional arguments only')
        value = args[0] if len(args) == 1 else list(args)
        return self.concrete(_strip_container_for_polymorphism(T.infer_type(value), len(args)))

    def _concrete_for_trace(self, args, kwargs) -> ConcreteComputation:
        if kwargs:
            raise SimharnessTypeError('polymorphic computations take positional arguments only')
        if len(args) == 1:
            t = tracing.to_building_block(args[0]).type_signature
        else:
            t = T.StructType([tracing.to_building_block(a).type_signature for a in args])
        return self.concrete(t)

    def __repr__(self) -> str:
        return f'<PolymorphicComputation {self.name or "?"}>'


def _strip_container_for_polymorphism(t: T.Type, nargs: int) -> T.Type:
    if nargs > 1 and isinstance(t, T.StructType):
        return T.StructType(t.items())
    return t


# ---------------------------------------------------------------- decorators


def _is_spec(x: Any) -> bool:
    if isinstance(x, (T.Type, list, tuple, dict)) or hasattr(x, 'as_numpy_dtype'):
        return True
    if isinstance(x, type):
        return True
    cls = type(x).__name__
    return cls in ('TensorSpec', 'DatasetSpec', 'dtype') or isinstance(x, str)


def num_positional_params(fn: Callable) -> Optional[int]:
    """Positional parameters of `fn`, or None when it takes *args."""
    sig = inspect.signature(fn)
    n = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return n


def _param_type_and_unpack(fn: Callable, specs: tuple) -> tuple:
    """(parameter type, unpack?) for the given decorator specs."""
    nparams = num_positional_params(fn)
    if len(specs) == 0:
        return None, False
    if nparams == 0:
        given = ', '.join(str(T.to_type(s)) for s in specs)
        raise SimharnessTypeError(
            f'{getattr(fn, "__name__", fn)} takes no parameters, but the parameter type(s) '
            f'{given} were given',
            actual=specs,
        )
    names: List[Optional[str]] = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(specs) == 1:
        t = T.to_type(specs[0])
        if nparams is not None and nparams >= 2:
            if isinstance(t, T.StructType) and len(t) == nparams:
                return _named_for_params(fn, t, cast(List[str], names)), True
            raise SimharnessTypeError(
                f'{fn.__name__} takes {nparams} parameters but the spec '
                f'{t} does not have {nparams} elements'
            )
        return t, False
    if nparams is not None and nparams != len(specs):
        raise SimharnessTypeError(
            f'{fn.__name__} takes {nparams} parameters but {len(specs)} specs were given'
        )
    if nparams is None:
        names = [None] * len(specs)
    return T.StructType([(n, T.to_type(s)) for n, s in zip(names, specs)]), True


def _named_for_params(fn: Callable, t: T.StructType, params: List[str]) -> T.StructType:
    """One struct type for several parameters, as federated_language bundles it: unnamed
    elements take the parameters' names; named ones must be the parameters' names."""
    given = [n for n, _ in t.items() if n is not None]
    if not given:
        return T.StructType(list(zip(params, t)), container=collections.OrderedDict)
    if len(given) != len(t):
        raise SimharnessTypeError(
            'Types with both named and unnamed fields cannot be unpacked into argument lists. '
            f'Found parameter type {t}.',
            actual=t,
        )
    if set(given) != set(params):
        raise SimharnessTypeError(
            f'Function argument names must match field names of parameter type. Found '
            f'argument names {params} of {getattr(fn, "__name__", fn)}, which do not match '
            f'{given}, the top-level fields of the parameter type {t}.',
            actual=t,
        )
    return t


def _decorator(
    make_concrete: Callable[[Callable, Optional[T.Type], bool], ConcreteComputation], kind: str
):
    def decorator(*args: Any, **options: Any) -> Any:
        unknown = sorted(set(options) - ({'jit_compile'} if kind == 'tf_computation' else set()))
        if unknown:
            raise SimharnessTypeError(
                f'{kind} got an unexpected keyword argument {unknown[0]!r}'
                + (' (it takes jit_compile=True/False/None)' if kind == 'tf_computation' else '')
            )
        jit = check_jit_compile(options.get('jit_compile'))
        make = make_concrete if jit is None else _forcing(make_concrete, jit)
        if args and callable(args[0]) and not _is_spec(args[0]):
            fn, specs = args[0], args[1:]
            return _wrap(fn, specs, make)
        specs = args
        for s in specs:
            T.to_type(s)  # a bad spec fails here, as in TFF, not when a function is decorated
        return lambda fn: _wrap(fn, specs, make)

    def _wrap(fn: Callable, specs: tuple, make_concrete: Any) -> Computation:
        if not callable(fn) or isinstance(fn, type):
            raise SimharnessTypeError(
                f'{kind} decorates a Python function, got {fn!r} of type {type(fn).__name__}',
                expected='function',
                actual=type(fn),
            )
        name = getattr(fn, '__name__', '')
        nparams = num_positional_params(fn)
        comp: Computation
        if specs or nparams == 0:
            param, unpack = _param_type_and_unpack(fn, specs)
            comp = make_concrete(fn, param, unpack)
        else:

            def make(param_type: Optional[T.Type]) -> ConcreteComputation:
                unpack = (
                    isinstance(param_type, T.StructType)
                    and nparams is not None
                    and nparams >= 2
                    and len(param_type) == nparams
                )
                return make_concrete(fn, param_type, unpack)

            comp = PolymorphicComputation(make, name=name)
        functools.update_wrapper(comp, fn, updated=())
        if kind == 'tf_computation':
            comp.run_inline_in_tf(fn)
        return comp

    return decorator


def _forcing(
    make_concrete: Callable[[Callable, Optional[T.Type], bool], ConcreteComputation], jit: bool
) -> Callable[[Callable, Optional[T.Type], bool], ConcreteComputation]:
    """`make_concrete` whose computations carry XLA forced to `jit` (`core.xla`)."""

    def make(fn: Callable, param: Optional[T.Type], unpack: bool) -> ConcreteComputation:
        comp = make_concrete(fn, param, unpack)
        built = comp.to_building_block()
        assert isinstance(built, bb.CompiledComputation)
        return ConcreteComputation(with_jit_compile(built, jit), comp.name)

    return make


def _make_tf(fn: Callable, param: Optional[T.Type], unpack: bool) -> ConcreteComputation:
    from simharness.core import tf_serialization

    name = getattr(fn, '__name__', '')
    if param is not None and T.contains(param, (T.FederatedType, T.FunctionType)):
        raise SimharnessTypeError(
            f'tf_computation {name!r} cannot take a parameter of type '
            f'{param}; federated and functional values belong in '
            'federated_computations'
        )
    return ConcreteComputation(
        tf_serialization.serialize_tf_function(fn, param, unpack, name), name
    )


def _make_federated(fn: Callable, param: Optional[T.Type], unpack: bool) -> ConcreteComputation:
    name = getattr(fn, '__name__', '')
    with tracing.tracing_scope() as scope:
        pname = f'{scope.fresh_name()}arg'
        if param is None:
            result = fn()
        else:
            ref = tracing.Value(bb.Reference(pname, param))
            result = call_unpacked(fn, cast(T.StructType, param), list(ref)) if unpack else fn(ref)
        if result is None:
            raise SimharnessTypeError(f'federated_computation {name!r} returned None')
        body = tracing.to_building_block(result)
        locals_ = list(scope.locals)
    if locals_:
        body = bb.Block(locals_, body)
    return ConcreteComputation(bb.Lambda(pname if param is not None else None, param, body), name)


#: `@tf_computation(*specs)`: trace a Python function into a serialized TF graph.
tf_computation = _decorator(_make_tf, 'tf_computation')
#: `@federated_computation(*specs)`: trace a Python function into building blocks.
federated_computation = _decorator(_make_federated, 'federated_computation')


# ---------------------------------------------------------------- check_returns_type


def _result_type(value: Any) -> T.Type:
    """The type of what a traced function returned (traced values, tensors, containers)."""
    if isinstance(value, tracing.Value):
        return value.type_signature
    if isinstance(value, Computation):
        return value.type_signature
    if hasattr(value, 'element_spec') and hasattr(value, 'reduce'):  # tf.data.Dataset
        return T.infer_type(value)
    if (
        hasattr(value, 'dtype')
        and hasattr(value, 'shape')
        and not isinstance(value, (list, tuple, dict))
    ):  # tensors, variables, arrays
        return T.TensorType(value.dtype, value.shape)
    if isinstance(value, Struct):
        return T.StructType([(n, _result_type(v)) for n, v in value.items()])
    if T.is_namedtuple(value):
        return T.StructType(
            [(f, _result_type(getattr(value, f))) for f in value._fields], container=type(value)
        )
    if attrs.has(type(value)):
        return T.StructType(
            [(a.name, _result_type(getattr(value, a.name))) for a in attrs.fields(type(value))],
            container=type(value),
        )
    if isinstance(value, collections.abc.Mapping):
        return T.StructType(
            [(str(k), _result_type(v)) for k, v in value.items()], container=type(value)
        )
    if isinstance(value, (list, tuple)):
        return T.StructType([_result_type(v) for v in value], container=type(value))
    return T.infer_type(value)


def check_returns_type(type_spec: Any) -> Callable[[Callable], Callable]:
    """Checks that the decorated function returns a value of exactly `type_spec` (TFF's).

    Use it under `tf_computation` / `federated_computation`: the check runs
    while the function is traced.

    ```python
    @simharness.tf_computation(tf.int32)
    @simharness.check_returns_type(tf.int32)
    def add_one(x):
        return x + 1
    ```

    Raises:
      SimharnessTypeError: `type_spec` is not a type spec (at decoration), or
        the function returns a value of another type (when it runs).
    """
    expected = T.to_type(type_spec)

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise SimharnessTypeError(
                f'check_returns_type decorates a function, got {fn!r} of type {type(fn).__name__}',
                actual=type(fn),
            )

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            actual = _result_type(result)
            if not expected.is_identical_to(actual):
                raise SimharnessTypeError(
                    f'{getattr(fn, "__name__", "the function")} returned a value of type '
                    f'{actual}, but check_returns_type asserts {expected}',
                    expected=expected,
                    actual=actual,
                )
            return result

        return wrapper

    return decorator
