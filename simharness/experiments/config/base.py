"""The config layer's shared parts: constants, the ``_check_*`` validators, `_Table` (a
frozen dataclass whose fields check themselves) and `_Union` (a tagged union's base:
``DataConfig(dataset=...)`` builds the variant the tag names, `build_variant`)."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from simharness.errors import ConfigError


#: Run id of an experiment without a sweep grid (and without overrides).
DEFAULT_RUN_ID = 'default'

HF_PARTITIONS = ('dirichlet', 'natural')
#: Data sets whose labels are sequences (next-token prediction): Keras models only.
SEQUENCE_DATASETS = ('shakespeare', 'stackoverflow')
PARTITIONS = ('dirichlet', 'iid')
#: ``[algorithm] name`` (`simharness.experiments.processes.build_learning_process`).
ALGORITHMS = ('fedadagrad', 'fedadam', 'fedavg', 'fedavgm', 'fedprox', 'fedsgd', 'fedyogi')
OPTIMIZERS = ('adagrad', 'adam', 'sgd', 'yogi')
COHORTS = ('random', 'reference', 'weighted', 'with_replacement')
#: Placement strategies of ``[stack] kind = 'ray'`` (Ray's placement groups).
RAY_PLACEMENT_STRATEGIES = ('PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD')

#: Number of clients of the reference workload (fedavg-synthetic-mlp.md).
REFERENCE_NUM_CLIENTS = 1000

_RUN_ID_SAFE = re.compile(r'[^A-Za-z0-9._=,+-]')
_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._+-]*$')


# ----------------------------------------------------------------- validators


def _fmt_allowed(allowed: Iterable[str]) -> str:
    return ', '.join(repr(a) for a in allowed)


def _check_int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f'{key} must be an int >= {minimum}, got {value!r}', key=key, value=value)
    if value < minimum:
        raise ConfigError(f'{key} must be an int >= {minimum}, got {value}', key=key, value=value)
    return int(value)


def _check_float(
    key: str, value: Any, *, minimum: float, inclusive: bool = True, below: Optional[float] = None
) -> float:
    bounds = f'{">=" if inclusive else ">"} {minimum:g}' + (
        f' and < {below:g}' if below is not None else ''
    )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f'{key} must be a number {bounds}, got {value!r}', key=key, value=value)
    v = float(value)
    ok = math.isfinite(v) and (v >= minimum if inclusive else v > minimum)
    if below is not None:
        ok = ok and v < below
    if not ok:
        raise ConfigError(f'{key} must be a number {bounds}, got {value!r}', key=key, value=value)
    return v


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f'{key} must be true or false, got {value!r}', key=key, value=value)
    return value


def _check_choice(key: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(
            f'{key} must be one of {_fmt_allowed(allowed)}, got {value!r}', key=key, value=value
        )
    return value


def _check_str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f'{key} must be a non-empty string, got {value!r}', key=key, value=value)
    return value


def _check_int_tuple(key: str, value: Any, length: Optional[int] = None) -> Tuple[int, ...]:
    what = (
        f'a list of {length} ints >= 1' if length is not None else 'a non-empty list of ints >= 1'
    )
    if (
        not isinstance(value, (list, tuple))
        or not value
        or (length is not None and len(value) != length)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    ):
        raise ConfigError(f'{key} must be {what}, got {value!r}', key=key, value=value)
    return tuple(int(v) for v in value)


Check = Callable[[str, Any], Any]


def _as_given(check: Check) -> Check:
    """`check`, keeping the value as given (an int stays an int in the resolved TOML)."""

    def keep(key: str, value: Any) -> Any:
        check(key, value)
        return value

    return keep


def _int(minimum: int) -> Check:
    return lambda key, value: _check_int(key, value, minimum)


def _num(minimum: float = 0.0, *, inclusive: bool = True, below: Optional[float] = None) -> Check:
    return lambda key, value: _check_float(
        key, value, minimum=minimum, inclusive=inclusive, below=below
    )


def _choice(allowed: Sequence[str]) -> Check:
    return lambda key, value: _check_choice(key, value, allowed)


def _ints(length: Optional[int] = None) -> Check:
    return lambda key, value: _check_int_tuple(key, value, length)


def _opt(default: Any, check: Optional[Check] = None) -> Any:
    """A table field: its default and its check ``(dotted key, value) -> value to keep``.

    A field whose default is None is optional: None means "not set" and is
    not checked.
    """
    return dataclasses.field(default=default, metadata={'check': check})


def _require(obj: Any, key: str, why: str) -> None:
    if getattr(obj, key) is None:
        raise ConfigError(
            f'{obj.TABLE}.{key} is required for {why}', key=f'{obj.TABLE}.{key}', value=None
        )


# ---------------------------------------------------------------------- tables


class _Table:
    """Base of the frozen dataclasses of the TOML tables: each field checks itself.

    After ``__init__``, every field's ``metadata['check']`` (see `_opt`) gets
    the dotted key and the value and returns the value to keep; then
    `_validate` checks what spans fields. A subclass given ``tag=...`` is a
    *variant* of a tagged union (`_Union`): it gets the union's tag field
    (``dataset``, ``name``, ``kind``; first, fixed to `tag`) and is
    registered under `tag`.
    """

    TABLE: ClassVar[str] = ''

    def __init_subclass__(cls, tag: Optional[str] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if tag is None:
            return
        union = next(base for base in cls.__mro__ if isinstance(base, _Union))
        cls.__annotations__ = {union.TAG: 'str', **inspect.get_annotations(cls)}
        setattr(cls, union.TAG, dataclasses.field(default=tag, init=False))
        union.VARIANTS[tag] = cls

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check, value = f.metadata.get('check'), getattr(self, f.name)
            if check is not None and not (value is None and f.default is None):
                object.__setattr__(self, f.name, check(f'{self.TABLE}.{f.name}', value))
        self._validate()

    def _validate(self) -> None:
        """Checks that span fields (none by default)."""


class _Union(type):
    """The metaclass of a tagged union's base (`DataConfig`, `ModelConfig`, `StackConfig`).

    ``DataConfig(dataset='files', path=...)`` builds the variant class that the
    tag names (`build_variant`); the variants (``class FilesData(DataConfig,
    tag='files')``) are frozen dataclasses holding exactly their options.
    """

    TABLE: str
    TAG: str
    DEFAULT: str
    VARIANTS: Dict[str, type]

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if 'VARIANTS' not in cls.__dict__:  # a variant class
            return super().__call__(*args, **kwargs)
        if args:
            raise TypeError(
                f'{cls.__name__}() takes keyword arguments only ({cls.TAG}=..., options)'
            )
        return build_variant(cls, kwargs)


def _own_keys(cls: type) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def table_keys(cls: type) -> List[str]:
    """The keys of a table: a union's are its tag and every variant's options, in an
    order that keeps each variant's (the first variant's first where they leave a choice)."""
    if not isinstance(cls, _Union):
        return _own_keys(cls)
    orders = [_own_keys(v) for v in cls.VARIANTS.values()]
    keys: List[str] = []
    while any(orders):
        key = next(o[0] for o in orders if o and all(o[0] not in other[1:] for other in orders))
        keys.append(key)
        orders = [[k for k in o if k != key] for o in orders]
    return keys


def _check_keys(table: str, body: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in body:
        if key not in allowed:
            raise ConfigError(
                f'unknown key {table}.{key}; allowed keys in [{table}]: {", ".join(allowed)}',
                key=f'{table}.{key}',
                value=body[key],
            )


def build_variant(union: _Union, body: Mapping[str, Any]) -> Any:
    """The variant of `union` that ``body[union.TAG]`` (default: ``union.DEFAULT``) names.

    The other keys of `body` are the variant's options (None: not set, the
    default). An option of another variant is an error naming the variants
    that take it.
    """
    table, tag = union.TABLE, union.TAG
    _check_keys(table, body, table_keys(union))
    choice = _check_choice(
        f'{table}.{tag}', body[tag] if tag in body else union.DEFAULT, sorted(union.VARIANTS)
    )
    cls = union.VARIANTS[choice]
    own = [k for k in _own_keys(cls) if k != tag]
    for key, value in body.items():
        if key != tag and key not in own and value is not None:
            takers = [c for c, v in sorted(union.VARIANTS.items()) if key in _own_keys(v)]
            raise ConfigError(
                f'{table}.{key} does not apply to {table}.{tag} = {choice!r} (its options: '
                f'{", ".join(sorted(own)) or "none"}; {key} is an option of {tag} '
                f'{_fmt_allowed(takers)})',
                key=f'{table}.{key}',
                value=value,
            )
    return cls(**{k: v for k, v in body.items() if k != tag and v is not None})
