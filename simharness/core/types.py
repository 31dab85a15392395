"""The type system, as in TFF: tensors, structs, sequences, functions, federated.

Types are immutable and hashable. Dtypes are stored as numpy dtypes (TF
dtypes are converted on the way in), so this module does not import
TensorFlow; `tf.DType` objects are recognised by duck typing
(`as_numpy_dtype`).

The placements (`CLIENTS`, `SERVER`: `core.placements`) and the rules of which
values a tensor type takes (`check_constant`, `array_refusal`, `check_array`,
`shape_refusal`: `core.value_rules`) live in modules of their own; this module
exports them with the types.
"""

from __future__ import annotations

import collections
import numbers
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple, Union

import attrs
import numpy as np

from simharness.core.struct import Struct
from simharness.core.placements import CLIENTS, SERVER, PlacementLiteral
from simharness.core.placements import placement_from_uri as placement_from_uri
from simharness.core.value_rules import array_refusal, check_array, check_constant, shape_refusal
from simharness.errors import SimharnessAttributeError, SimharnessTypeError, SimharnessValueError
from simharness.core.type_errors import (
    TypeNotAssignableError,
    TypesNotEquivalentError,
    TypesNotIdenticalError,
)


# ---------------------------------------------------------------- dtypes


def to_numpy_dtype(dtype: Any) -> np.dtype:
    """Converts a TF dtype, numpy dtype, Python type or name to a numpy dtype.

    Raises:
      SimharnessTypeError: `dtype` is not a dtype (None is not: numpy would
        read it as float64).
    """
    if dtype is None:
        raise SimharnessTypeError(
            'None is not a dtype; expected a tf.DType, a numpy dtype or a Python scalar type',
            actual=None,
        )
    if hasattr(dtype, 'as_numpy_dtype'):  # tf.DType
        if getattr(dtype, 'name', '') == 'string':
            return np.dtype(object)
        return np.dtype(dtype.as_numpy_dtype)
    if dtype is str or dtype is bytes or dtype is np.str_ or dtype is np.bytes_:
        return np.dtype(object)  # TFF's string type (federated_language: np.str_)
    try:
        out = np.dtype(dtype)
        return np.dtype(object) if out.kind in ('U', 'S') else out
    except (TypeError, ValueError) as e:
        raise SimharnessTypeError(
            f'{dtype!r} ({type(dtype).__name__}) is not a dtype; expected a '
            'tf.DType, a numpy dtype or a Python scalar type'
        ) from e


def _dtype_name(dtype: np.dtype) -> str:
    return 'str' if dtype == np.dtype(object) else dtype.name  # federated_language's name


# ---------------------------------------------------------------- types


class Type:
    """Base class of all types."""

    def is_assignable_from(self, source: 'Type') -> bool:
        raise NotImplementedError  # abstract; every subclass overrides

    def children(self) -> Iterator['Type']:
        """The types directly inside this one (TFF's `children`; none here)."""
        return iter(())

    def check_assignable_from(self, source: 'Type', what: str = 'value') -> None:
        """Raises `TypeNotAssignableError` (a `TypeError`) naming both types unless
        assignable."""
        if not self.is_assignable_from(source):
            raise TypeNotAssignableError(
                source,
                self,
                f'{what} of type {source} is not assignable to the expected type {self}',
            )

    def is_equivalent_to(self, other: 'Type') -> bool:
        return self.is_assignable_from(other) and other.is_assignable_from(self)

    def check_equivalent_to(self, other: 'Type') -> None:
        """Raises `TypesNotEquivalentError` unless the two types are equivalent."""
        if not self.is_equivalent_to(other):
            raise TypesNotEquivalentError(self, other)

    def is_identical_to(self, other: 'Type') -> bool:
        """Equal types (TFF's `is_identical_to`; a struct's Python container is not compared)."""
        return self == other

    def check_identical_to(self, other: 'Type') -> None:
        """Raises `TypesNotIdenticalError` unless the two types are identical."""
        if not self.is_identical_to(other):
            raise TypesNotIdenticalError(self, other)

    # TFF up to 0.60 asked a type its kind with these methods (`isinstance` since); the
    # programs of that time still do.
    def is_abstract(self) -> bool:
        return isinstance(self, AbstractType)

    def is_federated(self) -> bool:
        return isinstance(self, FederatedType)

    def is_function(self) -> bool:
        return isinstance(self, FunctionType)

    def is_placement(self) -> bool:
        return isinstance(self, PlacementType)

    def is_sequence(self) -> bool:
        return isinstance(self, SequenceType)

    def is_struct(self) -> bool:
        return isinstance(self, StructType)

    def is_struct_with_python(self) -> bool:
        return isinstance(self, StructType) and self.python_container is not None

    def is_tensor(self) -> bool:
        return isinstance(self, TensorType)

    def compact_representation(self) -> str:
        """TFF's one-line string form, e.g. ``{float32}@CLIENTS`` (the same as `str`)."""
        return str(self)

    def formatted_representation(self) -> str:
        """TFF's multi-line form; here the one-line form (`compact_representation`)."""
        return str(self)

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self})'


@attrs.frozen(repr=False, eq=True, hash=True, init=False)  # own __init__ below
class TensorType(Type):
    """A tensor of `dtype` and `shape` (None entries are unknown dimensions)."""

    dtype: np.dtype = attrs.field(converter=to_numpy_dtype)
    shape: Optional[Tuple[Optional[int], ...]] = attrs.field(default=())

    def __init__(self, dtype: Any, shape: Any = ()):
        self.__attrs_init__(dtype, _to_shape(shape))

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    @property
    def is_fully_defined(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    def is_assignable_from(self, source: Type) -> bool:
        if source is self:  # the same object: a walk of a large type would say so too
            return True
        if not isinstance(source, TensorType) or source.dtype != self.dtype:
            return False
        if self.shape is None:
            return True
        if source.shape is None or len(source.shape) != len(self.shape):
            return False
        return all(t is None or t == s for t, s in zip(self.shape, source.shape))

    def __str__(self) -> str:
        name = _dtype_name(self.dtype)
        if self.shape is None:
            return f'{name}[?*]'
        if not self.shape:
            return name
        dims = ','.join('?' if d is None else str(d) for d in self.shape)
        return f'{name}[{dims}]'


def _to_shape(shape: Any) -> Optional[Tuple[Optional[int], ...]]:
    """A shape as a tuple of ints and Nones (None: unknown rank), as `tf.TensorShape` takes it.

    Raises:
      SimharnessTypeError: not an int, a sequence of ints / None or a
        `tf.TensorShape` (a float or bool dimension is not silently truncated).
      SimharnessValueError: a negative dimension.
    """
    if shape is None:
        return None
    if hasattr(shape, 'as_list'):  # tf.TensorShape
        return None if shape.rank is None else tuple(shape.as_list())
    dims = [shape] if isinstance(shape, (numbers.Integral, np.integer)) else shape
    if isinstance(dims, (str, bytes)) or not isinstance(dims, collections.abc.Iterable):
        raise SimharnessTypeError(
            f'shape {shape!r} ({type(shape).__name__}) is not a shape; expected None, an int, a '
            'sequence of ints and Nones, or a tf.TensorShape',
            actual=shape,
        )
    out: list = []
    for d in dims:
        if hasattr(d, 'value') and not isinstance(d, (numbers.Number, np.generic)):
            d = d.value  # tf.compat.v1.Dimension
        if d is None:
            out.append(None)
            continue
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (numbers.Integral, np.integer)):
            raise SimharnessTypeError(
                f'dimension {d!r} ({type(d).__name__}) in shape {shape!r} is not an int or None',
                actual=d,
            )
        if d < 0:
            raise SimharnessValueError(f'negative dimension {int(d)} in shape {shape!r}')
        out.append(int(d))
    return tuple(out)


class StructType(Type):
    """An ordered struct of (optionally named) elements.

    Built from a list/tuple of types or `(name, type)` pairs, a dict, an
    OrderedDict, a namedtuple or an attrs class. `container` remembers the
    Python container so that results convert back into it.
    """

    __slots__ = ('_elements', '_names', 'container')

    def __init__(self, elements: Iterable[Any], container: Optional[type] = None):
        if isinstance(elements, collections.abc.Mapping):
            items = list(elements.items())
        elif isinstance(elements, (str, bytes)) or not isinstance(
            elements, collections.abc.Iterable
        ):
            raise SimharnessTypeError(
                f'StructType needs an iterable of types or (name, type) pairs, got {elements!r} '
                f'of type {type(elements).__name__}',
                actual=elements,
            )
        else:
            items = list(elements)
        names, types = [], []
        for item in items:
            if (
                isinstance(item, tuple)
                and len(item) == 2
                and (item[0] is None or isinstance(item[0], str))
                and not isinstance(item, (TensorType,))
                and _looks_like_type_spec(item[1])
                and not _is_dtype_like(item[0])
            ):
                name, t = item
            else:
                name, t = None, item
            names.append(name)
            types.append(to_type(t))
        seen = set()
        for n in names:
            if n is not None:
                if n in seen:  # TFF: ValueError (its StructType is a Struct)
                    raise SimharnessValueError(
                        f'duplicate element name {n!r} in struct type elements {names}'
                    )
                seen.add(n)
        self._names = tuple(names)
        self._elements = tuple(types)
        self.container = container

    # -- access
    def __len__(self) -> int:
        return len(self._elements)

    def __iter__(self) -> Iterator[Type]:
        return iter(self._elements)

    def children(self) -> Iterator[Type]:
        return iter(self._elements)

    def __getitem__(self, key: Union[int, str]) -> Type:
        if isinstance(key, str):  # by name, as TFF's: an AttributeError when missing
            return self.__getattr__(key)
        return self._elements[key]

    def __getattr__(self, name: str) -> Type:
        if name.startswith('_'):
            raise AttributeError(name)
        try:
            return self._elements[self._names.index(name)]
        except ValueError:
            raise SimharnessAttributeError(
                f'struct type {self} has no element named {name!r}'
            ) from None

    def index_of(self, name: str) -> int:
        try:
            return self._names.index(name)
        except ValueError:
            raise SimharnessTypeError(f'struct {self} has no element named {name!r}') from None

    @property
    def names(self) -> Tuple[Optional[str], ...]:
        return self._names

    def items(self) -> list:
        return list(zip(self._names, self._elements))

    # -- equality
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StructType)
            and self._names == other.names
            and self._elements == tuple(other)
        )

    def __hash__(self) -> int:
        return hash(('struct', self._names, self._elements))

    def __reduce__(self):
        return (StructType, (list(zip(self._names, self._elements)), self.container))

    def is_assignable_from(self, source: Type) -> bool:
        if source is self:  # the same object: a walk of a large type would say so too
            return True
        if not isinstance(source, StructType) or len(source) != len(self):
            return False
        for (tn, tt), (sn, st) in zip(self.items(), source.items()):
            if sn is not None and tn is not None and sn != tn:
                return False
            if sn is not None and tn is None:
                return False
            if not tt.is_assignable_from(st):
                return False
        return True

    def __str__(self) -> str:
        parts = [str(t) if n is None else f'{n}={t}' for n, t in self.items()]
        return '<' + ','.join(parts) + '>'

    @property
    def python_container(self) -> Optional[type]:
        """TFF's name of `container`: the Python container values convert into (or None)."""
        return self.container


class _StructWithPythonTypeMeta(type):
    """`isinstance(t, StructWithPythonType)`: whether `t` is a struct type with a Python
    container (TFF's `StructWithPythonType` is a subclass of its `StructType`)."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, StructType) and instance.container is not None


class StructWithPythonType(StructType, metaclass=_StructWithPythonTypeMeta):
    """TFF's `StructWithPythonType`: a `StructType` whose values convert into `container_type`.

    ``StructWithPythonType(elements, container_type)`` makes a `StructType` (with
    `container_type` as its container); ``isinstance(t, StructWithPythonType)`` says
    whether a struct type has a Python container, as in TFF.

    Raises:
      SimharnessTypeError: `container_type` is not a class.
    """

    __slots__ = ()

    def __new__(cls, elements: Any, container_type: type) -> 'StructWithPythonType':  # type: ignore[misc]
        if not isinstance(container_type, type):
            raise SimharnessTypeError(
                f'container_type must be a class (list, tuple, dict, a namedtuple or attrs '
                f'class), got {container_type!r} of type {type(container_type).__name__}',
                expected=type,
                actual=type(container_type),
            )
        return StructType(elements, container=container_type)  # type: ignore[return-value]


class AbstractType(Type):
    """A type variable (TFF's `AbstractType`), as in intrinsics' generic signatures.

    It stands for a concrete type in a signature; no value has it, and
    assignability with it is undefined (TFF raises `TypeError`).
    """

    __slots__ = ('label',)

    def __init__(self, label: str):
        if not isinstance(label, str) or not label:
            raise SimharnessTypeError(
                f'an AbstractType label must be a non-empty str, got {label!r}',
                expected=str,
                actual=type(label),
            )
        self.label = label

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AbstractType) and other.label == self.label

    def __hash__(self) -> int:
        return hash(('abstract', self.label))

    def __reduce__(self):
        return (AbstractType, (self.label,))

    def is_assignable_from(self, source: Type) -> bool:
        raise SimharnessTypeError(
            f'abstract type {self.label} cannot be compared for '
            'assignability; substitute a concrete type first'
        )

    def __str__(self) -> str:
        return self.label


@attrs.frozen(repr=False)
class SequenceType(Type):
    """A sequence (a `tf.data.Dataset`) of elements of `element` type."""

    element: Type = attrs.field(converter=lambda t: to_type(t))

    def __attrs_post_init__(self):
        if contains(self.element, (FederatedType, FunctionType, SequenceType)):
            raise SimharnessTypeError(
                f'sequence elements may not be federated, functional or sequences; '
                f'got {self.element}'
            )

    def is_assignable_from(self, source: Type) -> bool:
        if source is self:  # the same object: a walk of a large type would say so too
            return True
        return isinstance(source, SequenceType) and self.element.is_assignable_from(source.element)

    def children(self) -> Iterator[Type]:
        yield self.element

    def __str__(self) -> str:
        return f'{self.element}*'


@attrs.frozen(repr=False)
class FunctionType(Type):
    """A function from `parameter` (None: no parameter) to `result`."""

    parameter: Optional[Type] = attrs.field(converter=lambda t: None if t is None else to_type(t))
    result: Type = attrs.field(converter=lambda t: to_type(t))

    def is_assignable_from(self, source: Type) -> bool:
        if source is self:  # the same object: a walk of a large type would say so too
            return True
        if not isinstance(source, FunctionType):
            return False
        if (self.parameter is None) != (source.parameter is None):
            return False
        if (
            self.parameter is not None
            and source.parameter is not None
            and not source.parameter.is_assignable_from(self.parameter)
        ):
            return False
        return self.result.is_assignable_from(source.result)

    def children(self) -> Iterator[Type]:
        if self.parameter is not None:
            yield self.parameter
        yield self.result

    def __str__(self) -> str:
        p = '' if self.parameter is None else str(self.parameter)
        return f'({p} -> {self.result})'


@attrs.frozen(repr=False)
class PlacementType(Type):
    """The type of a placement literal."""

    def is_assignable_from(self, source: Type) -> bool:
        return isinstance(source, PlacementType)

    def __str__(self) -> str:
        return 'placement'


class FederatedType(Type):
    """A value of `member` type at `placement`; `all_equal` as in TFF."""

    __slots__ = ('member', 'placement', 'all_equal')

    def __init__(self, member: Any, placement: PlacementLiteral, all_equal: Optional[bool] = None):
        if not isinstance(placement, PlacementLiteral):
            raise SimharnessTypeError(
                f'placement {placement!r} ({type(placement).__name__}) is not a placement; '
                'expected simharness.CLIENTS or simharness.SERVER'
            )
        member = to_type(member)
        if contains(member, (FederatedType, FunctionType)):
            raise SimharnessTypeError(
                f'the member of a federated type may not be federated or functional; got {member}'
            )
        if all_equal is not None and not isinstance(all_equal, (bool, np.bool_)):
            raise SimharnessTypeError(
                f'all_equal must be a bool or None, got {all_equal!r} of type '
                f'{type(all_equal).__name__}',
                expected=bool,
                actual=type(all_equal),
            )
        self.member = member
        self.placement = placement
        self.all_equal = placement.default_all_equal if all_equal is None else bool(all_equal)

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, FederatedType)
            and self.member == other.member
            and self.placement is other.placement
            and self.all_equal == other.all_equal
        )

    def __hash__(self) -> int:
        return hash(('federated', self.member, self.placement.uri, self.all_equal))

    def children(self) -> Iterator[Type]:
        yield self.member

    def __reduce__(self):
        return (FederatedType, (self.member, self.placement, self.all_equal))

    def is_assignable_from(self, source: Type) -> bool:
        if source is self:  # the same object: a walk of a large type would say so too
            return True
        if not isinstance(source, FederatedType) or source.placement is not self.placement:
            return False
        if self.all_equal and not source.all_equal:
            return False
        return self.member.is_assignable_from(source.member)

    def __str__(self) -> str:
        if self.all_equal:
            return f'{self.member}@{self.placement.uri.upper()}'
        return f'{{{self.member}}}@{self.placement.uri.upper()}'


# ---------------------------------------------------------------- helpers


def contains(t: Type, kinds: tuple) -> bool:
    """Whether `t` is, or (in a struct, at any depth) holds, a type of one of `kinds`."""
    if isinstance(t, kinds):
        return True
    if isinstance(t, StructType):
        return any(contains(e, kinds) for e in t)
    return False


def _is_dtype_like(x: Any) -> bool:
    if hasattr(x, 'as_numpy_dtype'):
        return True
    if isinstance(x, (np.dtype, type)):
        return True
    return False


def _looks_like_type_spec(x: Any) -> bool:
    return (
        isinstance(x, (Type, np.dtype, list, tuple, dict, type))
        or hasattr(x, 'as_numpy_dtype')
        or attrs.has(type(x))
        or isinstance(x, collections.abc.Mapping)
    )


def _is_name_type_pair(x: Any) -> bool:
    return (
        isinstance(x, tuple)
        and not is_namedtuple(x)
        and len(x) == 2
        and isinstance(x[0], str)
        and _looks_like_type_spec(x[1])
    )


def is_namedtuple(x: Any) -> bool:
    """Whether `x` is a namedtuple instance."""
    return isinstance(x, tuple) and hasattr(type(x), '_fields')


def to_type(spec: Any) -> Type:
    """Converts a type spec into a `Type`.

    Accepts `Type`s, TF and numpy dtypes, Python scalar types, `(dtype, shape)`
    pairs, `tf.TensorSpec`, `tf.data.DatasetSpec`, and nested containers
    (list, tuple, dict, OrderedDict, namedtuple, attrs instances) of these.

    Raises:
      SimharnessTypeError: if `spec` cannot be understood as a type.
    """
    if isinstance(spec, Type):
        return spec
    if spec is None:
        raise SimharnessTypeError(
            'None is not a type spec; expected a dtype, a (dtype, shape) '
            'pair, a Type or a container of these'
        )
    cls_name = type(spec).__name__
    if cls_name == 'TensorSpec' or cls_name == 'BoundedTensorSpec':
        return TensorType(spec.dtype, spec.shape)
    if cls_name == 'DatasetSpec':
        return SequenceType(from_tf_structure(spec.element_spec))
    if isinstance(spec, type) and attrs.has(spec):
        raise SimharnessTypeError(
            f'{spec.__name__} is an attrs class, not a type spec; pass an instance whose '
            'fields hold the element types'
        )
    if _is_dtype_like(spec):
        return TensorType(spec)
    if isinstance(spec, str):
        return TensorType(spec)
    if (
        isinstance(spec, tuple)
        and not is_namedtuple(spec)
        and len(spec) == 2
        and _is_dtype_like(spec[0])
        and (
            spec[1] is None
            or isinstance(spec[1], (list, tuple, int))
            or hasattr(spec[1], 'as_list')
        )
        and not _is_dtype_like(spec[1])
        and (
            not isinstance(spec[1], (list, tuple))
            or all(d is None or isinstance(d, (int, np.integer)) for d in spec[1])
        )
    ):
        return TensorType(spec[0], spec[1])
    if is_namedtuple(spec):
        return StructType(
            [(f, to_type(getattr(spec, f))) for f in spec._fields], container=type(spec)
        )
    if attrs.has(type(spec)):
        return StructType(
            [(a.name, to_type(getattr(spec, a.name))) for a in attrs.fields(type(spec))],
            container=type(spec),
        )
    if isinstance(spec, collections.abc.Mapping):
        return StructType([(str(k), to_type(v)) for k, v in spec.items()], container=type(spec))
    if isinstance(spec, (list, tuple)):
        if any(_is_name_type_pair(v) for v in spec):
            # (name, type) pairs: a named struct with no Python container, as in TFF
            return StructType(spec)
        return StructType([to_type(v) for v in spec], container=type(spec))
    raise SimharnessTypeError(
        f'cannot convert {spec!r} ({cls_name}) to a type; expected a dtype, a (dtype, shape) '
        'pair, a Type or a container of these',
        actual=spec,
    )


def from_tf_structure(spec: Any) -> Type:
    """The type of a TF structure of specs (a dataset's ``element_spec``, say)."""
    cls_name = type(spec).__name__
    if cls_name in ('TensorSpec', 'DatasetSpec'):
        return to_type(spec)
    if is_namedtuple(spec):
        return StructType(
            [(f, from_tf_structure(getattr(spec, f))) for f in spec._fields], container=type(spec)
        )
    if isinstance(spec, collections.abc.Mapping):
        return StructType(
            [(str(k), from_tf_structure(v)) for k, v in spec.items()], container=type(spec)
        )
    if isinstance(spec, (list, tuple)):
        return StructType([from_tf_structure(v) for v in spec], container=type(spec))
    return to_type(spec)


def type_at_clients(member: Any, all_equal: bool = False) -> FederatedType:
    """`{member}@CLIENTS` (or `member@CLIENTS` when `all_equal`)."""
    return FederatedType(member, CLIENTS, all_equal)


def type_at_server(member: Any) -> FederatedType:
    """`member@SERVER`."""
    return FederatedType(member, SERVER, True)


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def infer_type(value: Any) -> Type:
    """The type of a Python/numpy/TF value, as the execution context sees it."""
    cls_name = type(value).__name__
    if isinstance(value, Type):
        raise SimharnessTypeError(f'{value} is a type, not a value')
    if hasattr(value, 'element_spec') and hasattr(value, 'reduce'):  # tf.data.Dataset
        return SequenceType(from_tf_structure(value.element_spec))
    if (
        hasattr(value, 'dtype')
        and hasattr(value, 'shape')
        and not isinstance(value, np.ndarray)
        and cls_name not in ('ndarray',)
        and hasattr(value, 'numpy')
    ):
        return TensorType(value.dtype, value.shape)
    if isinstance(value, (np.ndarray, np.generic)):
        return TensorType(value.dtype, value.shape)
    if isinstance(value, bool):
        return TensorType(np.bool_)
    if isinstance(value, int):
        # As `tf.constant`: int32 when it fits, else int64; beyond int64 an error.
        if _INT32_MIN <= value <= _INT32_MAX:
            return TensorType(np.int32)
        if _INT64_MIN <= value <= _INT64_MAX:
            return TensorType(np.int64)
        raise SimharnessValueError(
            f'the Python int {value} does not fit int64 (the widest TF integer a Python int '
            f'converts to); pass a numpy array of an explicit dtype or a float'
        )
    if isinstance(value, float):
        return TensorType(np.float32)
    if isinstance(value, (str, bytes)):
        return TensorType(np.dtype(object))
    if is_namedtuple(value):
        return StructType(
            [(f, infer_type(getattr(value, f))) for f in value._fields], container=type(value)
        )
    if attrs.has(type(value)):
        return StructType(
            [(a.name, infer_type(getattr(value, a.name))) for a in attrs.fields(type(value))],
            container=type(value),
        )
    if isinstance(value, collections.abc.Mapping):
        return StructType(
            [(str(k), infer_type(v)) for k, v in value.items()], container=type(value)
        )
    if isinstance(value, (list, tuple)):
        return StructType([infer_type(v) for v in value], container=type(value))
    if isinstance(value, Struct):
        return StructType([(n, infer_type(v)) for n, v in value.items()])
    raise SimharnessTypeError(
        f'cannot infer a type for {value!r} ({cls_name}); expected a number, an array, a '
        'tensor, a tf.data.Dataset or a container of these',
        actual=value,
    )


def flatten_type(t: Type) -> list:
    """The leaf (non-struct) types of `t`, depth first."""
    if isinstance(t, StructType):
        out = []
        for e in t:
            out.extend(flatten_type(e))
        return out
    return [t]


def is_numeric_dtype(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.number) and not np.issubdtype(dtype, np.complexfloating)


def contains_only_tensors(t: Type) -> bool:
    return all(isinstance(x, TensorType) for x in flatten_type(t))


TypeSpec = Union[Type, Any]
__all__: Sequence[str] = (
    'Type',
    'TensorType',
    'StructType',
    'SequenceType',
    'FunctionType',
    'FederatedType',
    'AbstractType',
    'StructWithPythonType',
    'PlacementType',
    'PlacementLiteral',
    'CLIENTS',
    'SERVER',
    'to_type',
    'type_at_clients',
    'type_at_server',
    'infer_type',
    'flatten_type',
    'contains',
    'is_namedtuple',
    'is_namedtuple_class',
    'from_tf_structure',
    'check_constant',
    'array_refusal',
    'check_array',
    'shape_refusal',
)


def is_namedtuple_class(cls: Any) -> bool:
    """Whether `cls` is a namedtuple class."""
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, '_fields')
