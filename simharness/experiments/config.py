"""Experiment configurations: one TOML file, parsed and validated in one place.

::

    TOML file --read_toml (the one parser)--> raw dict --config_from_dict--> ExperimentConfig
              (load_config = read_toml + relative data.path + config_from_dict)
    ExperimentConfig --apply_overrides(['key=value', ...])--> ExperimentConfig
    ExperimentConfig --expand_sweep--> [(run_id, ExperimentConfig without [sweep]), ...]
    ExperimentConfig --to_dict / to_toml--> the resolved config (every default filled in)

A file has a top-level ``name`` and the tables ``[data]``, ``[model]``,
``[algorithm]``, ``[training]``, ``[stack]`` and ``[sweep]``; every table
and key is optional except that ``[data] dataset = 'files'`` needs a
``path``. Unknown tables or keys, values of the wrong type or out of range,
and options that the chosen dataset / model / stack kind does not take are
`ConfigError` s that name the dotted key and the allowed values.

Three tables are tagged unions: a *discriminator* (``data.dataset``,
``model.name``, ``stack.kind``) picks the table's class, one frozen
dataclass per choice holding exactly that choice's options with their
defaults (``[stack] kind = 'process'`` is a `ProcessStack`;
``StackConfig(kind='process', num_workers=2)`` builds one). Every field
checks itself with the shared ``_check_*`` functions (`_Table`). When an
override or a sweep point changes a discriminator, the keys of the base
config that the new choice does not take are dropped (so
``--set stack.kind=thread`` works on a config that sets
``stack.num_workers``); keys set explicitly in the same override must fit.

Importing this module imports neither TensorFlow nor numpy.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import re
import sys
from pathlib import Path
from typing import (Any, Callable, ClassVar, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import tomli_w

from simharness.errors import ConfigError, SimharnessError
from simharness.runtime import pinning
from simharness.runtime.resources import GpuInventory

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PathLike = Union[str, Path]

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


def _check_float(key: str, value: Any, *, minimum: float, inclusive: bool = True,
                 below: Optional[float] = None) -> float:
    bounds = f'{">=" if inclusive else ">"} {minimum:g}' + (f' and < {below:g}' if below is not None
                                                            else '')
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
        raise ConfigError(f'{key} must be one of {_fmt_allowed(allowed)}, got {value!r}',
                          key=key, value=value)
    return value


def _check_str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f'{key} must be a non-empty string, got {value!r}', key=key, value=value)
    return value


def _check_int_tuple(key: str, value: Any, length: Optional[int] = None) -> Tuple[int, ...]:
    what = (f'a list of {length} ints >= 1' if length is not None
            else 'a non-empty list of ints >= 1')
    if not isinstance(value, (list, tuple)) or not value or (
            length is not None and len(value) != length) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
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
    return lambda key, value: _check_float(key, value, minimum=minimum, inclusive=inclusive,
                                           below=below)


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
        raise ConfigError(f'{obj.TABLE}.{key} is required for {why}', key=f'{obj.TABLE}.{key}',
                          value=None)


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
            raise TypeError(f'{cls.__name__}() takes keyword arguments only ({cls.TAG}=..., '
                            'options)')
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
            raise ConfigError(f'unknown key {table}.{key}; allowed keys in [{table}]: '
                              f'{", ".join(allowed)}', key=f'{table}.{key}', value=body[key])


def build_variant(union: _Union, body: Mapping[str, Any]) -> Any:
    """The variant of `union` that ``body[union.TAG]`` (default: ``union.DEFAULT``) names.

    The other keys of `body` are the variant's options (None: not set, the
    default). An option of another variant is an error naming the variants
    that take it.
    """
    table, tag = union.TABLE, union.TAG
    _check_keys(table, body, table_keys(union))
    choice = _check_choice(f'{table}.{tag}', body[tag] if tag in body else union.DEFAULT,
                           sorted(union.VARIANTS))
    cls = union.VARIANTS[choice]
    own = [k for k in _own_keys(cls) if k != tag]
    for key, value in body.items():
        if key != tag and key not in own and value is not None:
            takers = [c for c, v in sorted(union.VARIANTS.items()) if key in _own_keys(v)]
            raise ConfigError(
                f'{table}.{key} does not apply to {table}.{tag} = {choice!r} (its options: '
                f'{", ".join(sorted(own)) or "none"}; {key} is an option of {tag} '
                f'{_fmt_allowed(takers)})', key=f'{table}.{key}', value=value)
    return cls(**{k: v for k, v in body.items() if k != tag and v is not None})


# [data] ---------------------------------------------------------------------

class DataConfig(_Table, metaclass=_Union):
    """``[data]``: the federated data set, one variant class per ``dataset``.

    ``DataConfig(dataset=..., **options)`` builds the variant:
    `SyntheticData`, `DigitsData`, `FilesData`, `ReferenceData`,
    `EmnistData`, `Cifar100Data`, `ShakespeareData`, `StackOverflowData`,
    `HfData`. ``dataset`` is the tag (default ``'synthetic'``).
    """

    TABLE, TAG, DEFAULT = 'data', 'dataset', 'synthetic'
    VARIANTS: ClassVar[Dict[str, type]] = {}
    dataset: str  # the tag: a field of each variant

    @property
    def known_num_clients(self) -> Optional[int]:
        """The number of clients if the config tells it (not for 'files')."""
        return getattr(self, 'num_clients', None)


@dataclasses.dataclass(frozen=True)
class SyntheticData(DataConfig, tag='synthetic'):
    """Synthetic(alpha, beta) of FedProx.

    Attributes:
        num_clients: number of clients.
        alpha: std of the per-client model mean.
        beta: std of the per-client input mean.
        samples_per_client: samples per client.
        dim: input dimension.
        num_classes: number of classes.
        iid: the FedProx "Synthetic IID" variant.
        seed: data seed.
    """

    num_clients: int = _opt(20, _int(1))
    alpha: float = _opt(1.0, _num(0.0))
    beta: float = _opt(1.0, _num(0.0))
    samples_per_client: int = _opt(50, _int(1))
    dim: int = _opt(60, _int(1))
    num_classes: int = _opt(10, _int(2))
    iid: bool = _opt(False, _check_bool)
    seed: int = _opt(0, _int(0))


@dataclasses.dataclass(frozen=True)
class DigitsData(DataConfig, tag='digits'):
    """scikit-learn digits split over clients, with a held-out test set.

    Attributes:
        num_clients: number of clients.
        partition: ``'dirichlet'`` (label skew) or ``'iid'``.
        dirichlet_alpha: Dirichlet concentration (the 'dirichlet' partition only).
        test_fraction: held-out test fraction.
        min_size: smallest client.
        seed: data seed.
    """

    num_clients: int = _opt(20, _int(1))
    partition: str = _opt('dirichlet', _choice(PARTITIONS))
    dirichlet_alpha: float = _opt(0.5, _num(0.0, inclusive=False))
    test_fraction: float = _opt(0.2, _num(0.0, below=1.0))
    min_size: int = _opt(5, _int(1))
    seed: int = _opt(0, _int(0))


@dataclasses.dataclass(frozen=True)
class FilesData(DataConfig, tag='files'):
    """A directory of ``<client_id>.npz`` files, or one .npz / .csv file with a client id column.

    Attributes:
        num_classes: optional (default: largest label + 1).
        path: the directory or file (required; relative paths are relative to
            the config file when loaded with `load_config`).
        x_key: feature array / column name.
        y_key: label array / column name.
        client_id_key: client id array / column of a single file.
    """

    num_classes: Optional[int] = _opt(None, _int(2))
    path: Optional[str] = _opt(None, _check_str)
    x_key: str = _opt('x', _check_str)
    y_key: str = _opt('y', _check_str)
    client_id_key: str = _opt('client_id', _check_str)

    def _validate(self) -> None:
        _require(self, 'path', "data.dataset = 'files' (a directory of <client_id>.npz files, "
                 'or one .npz / .csv file)')
        if len({self.x_key, self.y_key, self.client_id_key}) != 3:
            raise ConfigError(
                f'data.x_key, data.y_key and data.client_id_key must differ, got '
                f'{self.x_key!r}, {self.y_key!r}, {self.client_id_key!r}',
                key='data.y_key', value=self.y_key)

    @property
    def known_num_clients(self) -> Optional[int]:
        return None


@dataclasses.dataclass(frozen=True)
class ReferenceData(DataConfig, tag='reference'):
    """Exactly the 1000-client Synthetic(1, 1) of benchmarks/fedavg-synthetic-mlp.md (no options)."""

    @property
    def known_num_clients(self) -> Optional[int]:
        return REFERENCE_NUM_CLIENTS


class _NeedsCacheDir:
    """A TFF benchmark data set: ``cache_dir`` (the directory holding TFF's published
    SQLite or HDF5 file, see `simharness.data.benchmarks`) is required;
    ``max_clients`` keeps the first N clients (sorted ids) of the train split."""

    def _validate(self) -> None:
        _require(self, 'cache_dir', f'data.dataset = {getattr(self, "dataset")!r} '
                 "(the directory with TFF's published file; nothing is downloaded)")


@dataclasses.dataclass(frozen=True)
class EmnistData(_NeedsCacheDir, DataConfig, tag='emnist'):
    """TFF's federated EMNIST; ``only_digits``: the 10-class digits-only variant."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    only_digits: bool = _opt(False, _check_bool)
    max_clients: Optional[int] = _opt(None, _int(1))


@dataclasses.dataclass(frozen=True)
class Cifar100Data(_NeedsCacheDir, DataConfig, tag='cifar100'):
    """TFF's federated CIFAR-100."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    max_clients: Optional[int] = _opt(None, _int(1))


@dataclasses.dataclass(frozen=True)
class ShakespeareData(_NeedsCacheDir, DataConfig, tag='shakespeare'):
    """TFF's Shakespeare (next-character prediction); ``sequence_length`` tokens per example."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    max_clients: Optional[int] = _opt(None, _int(1))
    sequence_length: int = _opt(80, _int(1))


@dataclasses.dataclass(frozen=True)
class StackOverflowData(_NeedsCacheDir, DataConfig, tag='stackoverflow'):
    """TFF's Stack Overflow (next-word prediction); ``sequence_length`` tokens per example,
    ``vocab_size`` most frequent words kept."""

    cache_dir: Optional[str] = _opt(None, _check_str)
    max_clients: Optional[int] = _opt(None, _int(1))
    sequence_length: int = _opt(20, _int(1))
    vocab_size: int = _opt(10000, _int(1))


@dataclasses.dataclass(frozen=True)
class HfData(DataConfig, tag='hf'):
    """A Hugging Face data set (`simharness.data.benchmarks.load_hf_dataset`).

    Attributes:
        num_clients, dirichlet_alpha, min_size, seed: of the 'dirichlet' partition.
        num_classes: optional (default: largest label + 1).
        partition: ``'natural'`` (one client per client_id_key value) or ``'dirichlet'``.
        path: a directory written by save_to_disk, or a data set name in the
            local Hugging Face cache (required).
        x_key, y_key: feature and label columns.
        client_id_key: the natural client id column (required for 'natural').
        cache_dir: the Hugging Face cache directory (optional).
        hf_split: the split of a saved DatasetDict (e.g. 'train').
    """

    num_clients: int = _opt(20, _int(1))
    num_classes: Optional[int] = _opt(None, _int(2))
    partition: str = _opt('natural', _choice(HF_PARTITIONS))
    dirichlet_alpha: float = _opt(0.5, _num(0.0, inclusive=False))
    min_size: int = _opt(1, _int(1))
    seed: int = _opt(0, _int(0))
    path: Optional[str] = _opt(None, _check_str)
    x_key: str = _opt('x', _check_str)
    y_key: str = _opt('y', _check_str)
    client_id_key: Optional[str] = _opt(None, _check_str)
    cache_dir: Optional[str] = _opt(None, _check_str)
    hf_split: Optional[str] = _opt(None, _check_str)

    def _validate(self) -> None:
        _require(self, 'path', "data.dataset = 'hf' (a save_to_disk directory or a locally "
                 'cached data set name)')
        if self.partition == 'natural':
            _require(self, 'client_id_key', "data.partition = 'natural' (the column naming "
                     "each example's client)")

    @property
    def known_num_clients(self) -> Optional[int]:
        return None if self.partition == 'natural' else self.num_clients


# [model] --------------------------------------------------------------------

class ModelConfig(_Table, metaclass=_Union):
    """``[model]``: the architecture (see `simharness.learning.models`), one class per ``name``.

    ``ModelConfig(name=..., **options)`` builds `MlpModel` (default),
    `LogregModel`, `CnnModel` or `KerasModel`. The input shape and number of
    classes come from the data. Initial weights are ``init_weights(model,
    training.seed)``; for the reference dataset they are the benchmark's
    (``init_weights(model, 1)``, which is ``reference_mlp_init()`` for the
    default mlp).
    """

    TABLE, TAG, DEFAULT = 'model', 'name', 'mlp'
    VARIANTS: ClassVar[Dict[str, type]] = {}
    name: str  # the tag: a field of each variant

    def options(self) -> Dict[str, Any]:
        """The keyword options of `simharness.learning.get_model` for this model."""
        return {k: getattr(self, k) for k in _own_keys(type(self)) if k != self.TAG}


@dataclasses.dataclass(frozen=True)
class LogregModel(ModelConfig, tag='logreg'):
    """Logistic regression (no options)."""


@dataclasses.dataclass(frozen=True)
class MlpModel(ModelConfig, tag='mlp'):
    """A multi-layer perceptron.

    Attributes:
        hidden_sizes: widths of the hidden layers.
    """

    hidden_sizes: Tuple[int, ...] = _opt((256, 256), _ints())


@dataclasses.dataclass(frozen=True)
class CnnModel(ModelConfig, tag='cnn'):
    """Two conv + max-pool layers and a dense layer (image data: [H, W, C] examples).

    Attributes:
        conv_filters: filters of the two conv layers.
        kernel_size: conv kernel side.
        pool_size: max-pool side.
    """

    conv_filters: Tuple[int, ...] = _opt((16, 32), _ints(2))
    kernel_size: int = _opt(3, _int(1))
    pool_size: int = _opt(2, _int(1))


@dataclasses.dataclass(frozen=True)
class KerasModel(ModelConfig, tag='keras'):
    """A Keras model.

    Attributes:
        keras: ``"package.module:function"``, a function ``(input_shape,
            num_classes) -> keras.Model`` (its compiled loss, else sparse
            categorical cross-entropy from logits; metric: accuracy); initial
            weights: ``keras.utils.set_random_seed(seed)`` then a fresh build.
            Required.
    """

    keras: Optional[str] = None

    def _validate(self) -> None:
        _require(self, 'keras', 'model.name = "keras" (a "package.module:function" building '
                 'the keras.Model)')
        if not isinstance(self.keras, str) or self.keras.count(':') != 1 or not all(
                self.keras.split(':')):
            raise ConfigError(f'model.keras must look like "package.module:function", got '
                              f'{self.keras!r}', key='model.keras', value=self.keras)


# [algorithm] [training] [aggregator] -----------------------------------------

@dataclasses.dataclass(frozen=True)
class AlgorithmConfig(_Table):
    """``[algorithm]``: the federated algorithm and its hyper-parameters.

    Attributes:
        name: ``'fedavg'`` (default), ``'fedavgm'`` (server SGD with
            momentum, 0.9 unless server_momentum is set), ``'fedadam'``,
            ``'fedyogi'``, ``'fedadagrad'`` (adaptive server optimizers),
            ``'fedprox'`` or ``'fedsgd'`` (see
            `simharness.experiments.processes.build_learning_process`).
        client_learning_rate: local step (> 0; default 0.05).
        local_epochs: passes over the client data per round (>= 1; default 1).
        batch_size: examples per local step (>= 1; default 10).
        server_learning_rate: server step (> 0; default 1.0).
        server_momentum: server SGD momentum in [0, 1) (default 0).
        client_optimizer: ``'sgd'`` (default), ``'adam'``, ``'yogi'``, ``'adagrad'``.
        client_momentum: momentum of a client SGD in [0, 1) (default 0).
        server_optimizer: overrides the one the name implies (optional).
        beta_1, beta_2, epsilon: of adam / yogi (defaults 0.9, 0.999, and
            1e-7 for adam, 1e-3 for yogi, 1e-7 for adagrad).
        proximal_strength: FedProx's mu (> 0; default 0.01).
    """

    TABLE: ClassVar[str] = 'algorithm'
    name: str = _opt('fedavg', _choice(ALGORITHMS))
    client_learning_rate: float = _opt(0.05, _num(0.0, inclusive=False))
    local_epochs: int = _opt(1, _int(1))
    batch_size: int = _opt(10, _int(1))
    server_learning_rate: float = _opt(1.0, _num(0.0, inclusive=False))
    server_momentum: float = _opt(0.0, _num(0.0, below=1.0))
    client_optimizer: str = _opt('sgd', _choice(OPTIMIZERS))
    client_momentum: float = _opt(0.0, _num(0.0, below=1.0))
    server_optimizer: Optional[str] = _opt(None, _choice(OPTIMIZERS))
    beta_1: float = _opt(0.9, _num(0.0, below=1.0))
    beta_2: float = _opt(0.999, _num(0.0, below=1.0))
    epsilon: Optional[float] = _opt(None, _num(0.0, inclusive=False))
    proximal_strength: float = _opt(0.01, _num(0.0, inclusive=False))


def _check_availability(key: str, value: Any) -> float:
    a = _check_float(key, value, minimum=0.0, inclusive=False)
    if a > 1.0:
        raise ConfigError(f'{key} must be in (0, 1], got {a}', key=key, value=a)
    return a


@dataclasses.dataclass(frozen=True)
class TrainingConfig(_Table):
    """``[training]``: rounds, cohorts, seed and evaluation schedule.

    Attributes:
        rounds: number of rounds (>= 1; default 10). Rounds are numbered
            from 0.
        clients_per_round: cohort size (>= 1, at most the number of
            clients; default 10).
        seed: seed of the cohort sampling and of the initial weights
            (>= 0; default 0).
        eval_every: central evaluation after every this many rounds, and
            always after the last one (0: only after the last; default 1).
        cohort: ``'random'`` (``sample_clients(ids, k, round, seed)``,
            default) or ``'reference'`` (round r takes the clients
            ``(r * k + i) mod N``, i < k, in client-id order: the rule of
            the reference benchmark), ``'weighted'`` (without replacement,
            with probability proportional to the client's size) or
            ``'with_replacement'`` (uniform, a client may appear twice).
        availability: each round each client is available with this
            probability (independently, seeded by seed and round); the
            cohort is drawn from the available ones (default 1.0).
        checkpoint_every: save the server state every this many rounds
            (and after the last); an interrupted run resumes from its last
            checkpoint (0: never; default 10).
        early_stopping_metric: the metric watched by early stopping and
            best-model tracking (default 'eval_loss'; names with "loss"
            are minimized, others maximized).
        early_stopping_patience: stop after this many evaluations without
            improvement (0: never; default 0).
        tensorboard: write TensorBoard scalars to <run>/tensorboard
            (default true).
        federated_eval: besides the central evaluation, evaluate the new
            weights federatedly (the process's ``evaluate`` on the stack, over
            every client's data) when evaluating: ``fed_eval_loss``,
            ``fed_eval_accuracy`` (default false).
    """

    TABLE: ClassVar[str] = 'training'
    rounds: int = _opt(10, _int(1))
    clients_per_round: int = _opt(10, _int(1))
    seed: int = _opt(0, _int(0))
    eval_every: int = _opt(1, _int(0))
    cohort: str = _opt('random', _choice(COHORTS))
    availability: float = _opt(1.0, _check_availability)
    checkpoint_every: int = _opt(10, _int(0))
    early_stopping_metric: str = _opt('eval_loss', _check_str)
    early_stopping_patience: int = _opt(0, _int(0))
    tensorboard: bool = _opt(True, _check_bool)
    federated_eval: bool = _opt(False, _check_bool)

    def evaluates_after(self, round_num: int) -> bool:
        """Whether central evaluation runs after round `round_num` (0-based)."""
        if round_num == self.rounds - 1:
            return True
        return self.eval_every > 0 and (round_num + 1) % self.eval_every == 0


def _agg_num(key: str, v: Any, *, low: float = 0.0, strict: bool = True,
             high: float = math.inf) -> float:
    """A number of the ``[aggregator]`` table (the error names ``aggregator.<key>``)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (
            v <= low if strict else v < low) or v >= high:
        raise ConfigError(f'aggregator.{key}: aggregator {key} must be a number '
                          f'{">" if strict else ">="} {low:g}'
                          + (f' and < {high:g}' if high < math.inf else '') + f', got {v!r}',
                          key=f'aggregator.{key}', value=v)
    return float(v)


def _agg_error(key: str, message: str, value: Any = None) -> ConfigError:
    return ConfigError(f'aggregator.{key}: {message}', key=f'aggregator.{key}', value=value)


@dataclasses.dataclass(frozen=True)
class AggregatorConfig(_Table):
    """``[aggregator]``: how client updates are combined (TFF's ``tff.aggregators``).

    `simharness.experiments.processes.build_model_aggregator` builds the
    factory: the (weighted) mean, `clipping_factory` (fixed or adaptive
    norm), `DifferentiallyPrivateFactory.gaussian_fixed / gaussian_adaptive`,
    or an unweighted mean over `SecureSumFactory`.

    Attributes:
        weighted: mean weighted by client example counts (default true;
            Gaussian DP and secure sums need false).
        clip: L2 clip norm of each client update (the initial norm when
            adaptive_clip); unset: no clipping.
        adaptive_clip: adapt the clip norm to target_quantile (default false).
        target_quantile: of the adaptive clipping (default 0.5).
        clip_learning_rate: of the adaptive clipping (default 0.2).
        noise_multiplier: central Gaussian DP noise / clip norm (default 0:
            off); the mean divides by training.clients_per_round.
        clipped_count_stddev: adaptive DP: noise on the unclipped count
            (default 0.05 * clients_per_round).
        dp_delta: the delta of the reported epsilon (default 1e-5).
        quantize_bits: with secure: the updates are summed as integers
            (SecureSumFactory quantizes within quantize_range); required by
            secure.
        quantize_range: the secure sum's range [-R, R] (default: clip).
        secure: sum the updates with a secure sum (unweighted).
        seed: seed of the DP noise (default 0).

    Every option is checked here (pure Python, no TensorFlow).
    """

    TABLE: ClassVar[str] = 'aggregator'
    weighted: bool = _opt(True, _check_bool)
    clip: Optional[float] = None
    adaptive_clip: bool = _opt(False, _check_bool)
    target_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    noise_multiplier: float = 0.0
    clipped_count_stddev: Optional[float] = None
    dp_delta: float = _opt(1e-5, _as_given(_num(0.0, inclusive=False, below=1.0)))
    quantize_bits: Optional[int] = None
    quantize_range: Optional[float] = None
    secure: bool = _opt(False, _check_bool)
    seed: int = _opt(0, _int(0))

    def _validate(self) -> None:
        if self.clip is not None:
            _agg_num('clip', self.clip)
        if self.adaptive_clip and self.clip is None:
            raise _agg_error('clip', 'adaptive clipping needs an initial clip norm')
        _agg_num('target_quantile', self.target_quantile, high=1.0)
        _agg_num('clip_learning_rate', self.clip_learning_rate, strict=False)
        _agg_num('noise_multiplier', self.noise_multiplier, strict=False)
        if (self.noise_multiplier > 0 or self.secure) and self.weighted:
            raise _agg_error('weighted', 'Gaussian DP and secure sums aggregate unweighted: '
                             'set weighted = false', True)
        if self.noise_multiplier > 0 and self.clip is None:
            raise _agg_error('clip', 'Gaussian DP needs a clip norm (the sensitivity)')
        if self.clipped_count_stddev is not None:
            _agg_num('clipped_count_stddev', self.clipped_count_stddev)
        if self.quantize_bits is not None:
            b = self.quantize_bits
            if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 16:
                raise _agg_error('quantize_bits',
                                 f'quantize_bits must be an int in [1, 16], got {b!r}', b)
            if not self.secure:
                raise ConfigError(
                    'aggregator.quantize_bits without aggregator.secure has no TFF aggregator: '
                    'set secure = true (SecureSumFactory quantizes within quantize_range) or '
                    'drop quantize_bits', key='aggregator.quantize_bits', value=b)
            if self.quantize_range is None and self.clip is None:
                raise _agg_error('quantize_range',
                                 'quantization needs quantize_range or a clip norm')
        if self.quantize_range is not None:
            _agg_num('quantize_range', self.quantize_range)
        if self.secure and self.quantize_bits is None:
            raise _agg_error('quantize_bits', 'a secure sum adds integers: set quantize_bits')
        if self.secure and self.noise_multiplier > 0:
            raise _agg_error('secure', 'secure sums with central DP noise are not combined here '
                             '(the server would add noise to the securely summed update): '
                             'choose one', True)


# [stack] --------------------------------------------------------------------

class StackConfig(_Table, metaclass=_Union):
    """``[stack]``: where the clients run, one class per ``kind``.

    ``StackConfig(kind=..., **options)`` builds `ThreadStack` (default:
    `local_executor_factory`), `ProcessStack` (`process_executor_factory`:
    pinned worker processes) or `RayStack` (`ray_executor_factory`: Ray
    actors, on this machine or a cluster).
    """

    TABLE, TAG, DEFAULT = 'stack', 'kind', 'thread'
    VARIANTS: ClassVar[Dict[str, type]] = {}
    kind: str  # the tag: a field of each variant


@dataclasses.dataclass(frozen=True)
class ThreadStack(StackConfig, tag='thread'):
    """Client threads in this process.

    Attributes:
        clients_per_thread: clients per client thread.
    """

    clients_per_thread: int = _opt(1, _int(1))


def _check_devices(key: str, d: Any) -> Union[str, Tuple[Union[int, str], ...]]:
    if isinstance(d, (list, tuple)):
        if not d or not all((isinstance(v, int) and not isinstance(v, bool) and v >= 0)
                            or (isinstance(v, str) and v) for v in d):
            raise ConfigError(
                f'{key} must be a string like "cuda:0" or a non-empty list of GPU ids (ints '
                f'>= 0) or device strings, got {d!r}', key=key, value=d)
        d = tuple(d)
    elif not isinstance(d, str) or not d:
        raise ConfigError(f'{key} must be a string like "cuda:0" or a list of GPU ids, got '
                          f'{d!r}', key=key, value=d)
    try:
        pinning.parse_devices(list(d) if isinstance(d, tuple) else d)
    except SimharnessError as e:
        raise ConfigError(f'{key}: {e}', key=key, value=d) from e
    return d


@dataclasses.dataclass(frozen=True)
class ProcessStack(StackConfig, tag='process'):
    """Pinned worker processes on this machine.

    Attributes:
        num_workers: worker processes (default: one per usable core, or per
            GPU slot when `devices` names GPUs).
        clients_per_worker: most clients per TF call in a worker.
        cpu_affinity: pin each worker to its own cores.
        devices: GPUs to use ('cuda:0', [0, 1], ...; default: CPU).
        workers_per_gpu: workers sharing a GPU.
    """

    num_workers: Optional[int] = _opt(None, _int(1))
    clients_per_worker: int = _opt(256, _int(1))
    cpu_affinity: bool = _opt(True, _check_bool)
    devices: Optional[Union[str, Tuple[Union[int, str], ...]]] = _opt(None, _check_devices)
    workers_per_gpu: int = _opt(1, _int(1))


def _check_gpu_share(key: str, value: Any) -> Any:
    _check_float(key, value, minimum=0)
    if value > 1:
        raise ConfigError(f'{key} must be a number in [0, 1] (a worker uses one GPU), got '
                          f'{value!r}', key=key, value=value)
    return value


@dataclasses.dataclass(frozen=True)
class RayStack(StackConfig, tag='ray'):
    """Ray actors (`ray_executor_factory`), on this machine or a cluster.

    Attributes:
        num_workers, clients_per_worker, cpu_affinity: as for the process stack.
        address: the cluster to join (``'auto'``, ``'host:6379'``,
            ``'ray://host:10001'``; default: start a local Ray).
        num_cpus_per_worker: CPUs reserved per actor.
        num_gpus_per_worker: GPUs per actor, 0 .. 1.
        placement_strategy: 'PACK', 'SPREAD', 'STRICT_PACK' or 'STRICT_SPREAD'.
    """

    num_workers: Optional[int] = _opt(None, _int(1))
    clients_per_worker: int = _opt(256, _int(1))
    cpu_affinity: bool = _opt(True, _check_bool)
    address: Optional[str] = _opt(None, _check_str)
    num_cpus_per_worker: float = _opt(1, _as_given(_num(0, inclusive=False)))
    num_gpus_per_worker: float = _opt(0, _check_gpu_share)
    placement_strategy: str = _opt('PACK', _choice(RAY_PLACEMENT_STRATEGIES))


def check_stack_devices(stack: StackConfig, inventory: Optional[GpuInventory] = None) -> None:
    """Checks that the GPUs `stack.devices` names are on this machine.

    Not part of validating a config (a config may be written on one machine
    and run on another): the runner calls it before it builds the stack.

    Args:
        stack: the ``[stack]`` table.
        inventory: the GPUs found; None: `resources.discover_gpus()` (no
            TensorFlow import).

    Raises:
        ConfigError: naming ``stack.devices``, the GPUs asked for, the GPUs
            found and what was checked.
    """
    if not isinstance(stack, ProcessStack) or stack.devices is None:
        return
    devices = list(stack.devices) if isinstance(stack.devices, tuple) else stack.devices
    try:
        pinning.check_gpus_exist(devices, pinning.parse_devices(devices) or (), inventory,
                                 name='stack.devices')
    except SimharnessError as e:
        raise ConfigError(str(e), key='stack.devices', value=stack.devices) from e


        raise ConfigError(str(e), key='stack.devices', value=stack.devices) from e


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """``[sweep]``: a grid of overrides; each point is one run.

    Attributes:
        grid: pairs ``(dotted key, values)`` in file order, e.g.
            ``(('stack.num_workers', (1, 2)), ('training.clients_per_round',
            (10, 100)))``. In TOML: ``[sweep.grid]`` with quoted dotted
            keys (``"stack.num_workers" = [1, 2]``) or nested tables.
    """

    grid: Tuple[Tuple[str, Tuple[Any, ...]], ...] = ()

    def __post_init__(self) -> None:
        grid = self.grid
        if isinstance(grid, Mapping):
            grid = tuple(_flatten_grid(grid))
        if not isinstance(grid, (list, tuple)):
            raise ConfigError(f'sweep.grid must be a table of dotted keys to lists, got {grid!r}',
                              key='sweep.grid', value=grid)
        out = []
        seen = set()
        valid = [k for k in valid_keys(include_sweep=False) if k != 'name']
        for item in grid:
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise ConfigError(f'sweep.grid entries must be (key, values) pairs, got {item!r}',
                                  key='sweep.grid', value=item)
            key, values = item
            if key not in valid:
                raise ConfigError(
                    f'sweep.grid: unknown key {key!r}; valid keys: {", ".join(valid)}',
                    key=f'sweep.grid.{key}', value=values)
            if key in seen:
                raise ConfigError(f'sweep.grid: key {key!r} appears twice',
                                  key=f'sweep.grid.{key}', value=values)
            seen.add(key)
            if not isinstance(values, (list, tuple)) or not values:
                raise ConfigError(
                    f'sweep.grid.{key} must be a non-empty list of values, got {values!r}',
                    key=f'sweep.grid.{key}', value=values)
            out.append((key, tuple(_freeze(v) for v in values)))
        object.__setattr__(self, 'grid', tuple(out))


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _flatten_grid(grid: Mapping[str, Any], prefix: str = '') -> Iterable[Tuple[str, Any]]:
    """Nested tables ``{stack: {num_workers: [..]}}`` -> ``('stack.num_workers', [..])``."""
    for k, v in grid.items():
        key = f'{prefix}{k}'
        if isinstance(v, Mapping):
            yield from _flatten_grid(v, key + '.')
        else:
            yield key, v


_TABLES: Mapping[str, type] = {
    'data': DataConfig, 'model': ModelConfig, 'algorithm': AlgorithmConfig,
    'aggregator': AggregatorConfig, 'training': TrainingConfig, 'stack': StackConfig,
    'sweep': SweepConfig,
}
_UNIONS: Mapping[str, _Union] = {'data': DataConfig, 'model': ModelConfig, 'stack': StackConfig}
_TOP_KEYS = ('name',) + tuple(_TABLES)
DATASETS = tuple(sorted(DataConfig.VARIANTS))
MODEL_NAMES = tuple(sorted(ModelConfig.VARIANTS))
STACK_KINDS = tuple(sorted(StackConfig.VARIANTS))


def valid_keys(include_sweep: bool = True) -> List[str]:
    """Every dotted key a config (or an override) may set, in table order."""
    keys = ['name']
    for table, cls in _TABLES.items():
        if table == 'sweep' and not include_sweep:
            continue
        keys += [f'{table}.{k}' for k in table_keys(cls)]
    return keys


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: what to train, where, for how long; and an optional sweep.

    Attributes:
        name: the experiment name; results go to ``<results>/<name>/<run-id>/``.
            Letters, digits and ``. _ + -``.
        data: ``[data]``.
        model: ``[model]``.
        algorithm: ``[algorithm]``.
        aggregator: ``[aggregator]``.
        training: ``[training]``.
        stack: ``[stack]``.
        sweep: ``[sweep]`` (an empty grid: a single run).
    """

    name: str
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    aggregator: AggregatorConfig = dataclasses.field(default_factory=AggregatorConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    stack: StackConfig = dataclasses.field(default_factory=StackConfig)
    sweep: SweepConfig = dataclasses.field(default_factory=SweepConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigError(
                f'name must be a non-empty string of letters, digits and ". _ + -" (it names a '
                f'results directory), got {self.name!r}', key='name', value=self.name)
        for table, cls in _TABLES.items():
            if not isinstance(getattr(self, table), cls):
                raise ConfigError(f'[{table}] must be a {cls.__name__}, got '
                                  f'{type(getattr(self, table)).__name__}', key=table)
        n = self.data.known_num_clients
        k = self.training.clients_per_round
        if n is not None and k > n:
            raise ConfigError(
                f'training.clients_per_round = {k} is more than the {n} clients of the data '
                f'(data.num_clients)', key='training.clients_per_round', value=k)
        if self.data.dataset in SEQUENCE_DATASETS and self.model.name != 'keras':
            raise ConfigError(
                f'data.dataset = {self.data.dataset!r} is next-token prediction (sequence '
                f'labels): it needs model.name = "keras" with a sequence model, not '
                f'{self.model.name!r}', key='model.name', value=self.model.name)
        if self.model.name == 'cnn' and self.data.dataset in ('synthetic', 'reference'):
            raise ConfigError(
                f"model.name = 'cnn' needs image data (data.dataset 'digits' or 'files' with "
                f"[H, W, C] examples), not data.dataset = {self.data.dataset!r}",
                key='model.name', value='cnn')

    # ------------------------------------------------------------ views
    @property
    def init_seed(self) -> int:
        """Seed of the initial weights: 1 for the reference dataset, else training.seed."""
        return 1 if self.data.dataset == 'reference' else self.training.seed

    def to_dict(self) -> Dict[str, Any]:
        """The resolved config as nested dicts of TOML values (None values left out)."""
        out: Dict[str, Any] = {'name': self.name}
        for table in _TABLES:
            obj = getattr(self, table)
            if table == 'sweep':
                if obj.grid:
                    out['sweep'] = {'grid': {k: _thaw(v) for k, v in obj.grid}}
                continue
            out[table] = {f.name: _thaw(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                          if getattr(obj, f.name) is not None}
        return out

    def to_toml(self) -> str:
        """The resolved config as TOML text (`load_config` reads it back)."""
        return dumps_toml(self.to_dict())

    def replace(self, **changes: Any) -> 'ExperimentConfig':
        """A copy with some top-level fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


# ------------------------------------------------------------------- parsing

def config_from_dict(raw: Mapping[str, Any], default_name: Optional[str] = None
                     ) -> ExperimentConfig:
    """Builds and validates an `ExperimentConfig` from nested dicts (parsed TOML).

    Args:
        raw: ``{'name': ..., 'data': {...}, ...}``.
        default_name: the name when `raw` has none (e.g. the file stem).

    Returns:
        The validated config.

    Raises:
        ConfigError: unknown tables or keys (listing the allowed ones), a
            table that is not a table, or any invalid value.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f'a config must be a table, got {type(raw).__name__}', key='')
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(
                f'unknown top-level key or table {key!r}; allowed: {_fmt_allowed(_TOP_KEYS)}',
                key=str(key), value=raw[key])
    name = raw.get('name', default_name)
    if name is None:
        raise ConfigError('the config needs a top-level name = "..."', key='name')
    tables: Dict[str, Any] = {}
    for table, cls in _TABLES.items():
        body = raw.get(table, {})
        if not isinstance(body, Mapping):
            raise ConfigError(f'[{table}] must be a table, got {body!r}', key=table, value=body)
        _check_keys(table, body, table_keys(cls))
        if table == 'sweep':
            tables[table] = SweepConfig(grid=body.get('grid', {}))
            continue
        kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in body.items()}
        if table == 'model' and 'keras' in kwargs and 'name' not in kwargs:
            kwargs['name'] = 'keras'  # [model] keras = "module:function" alone names a Keras model
        tables[table] = cls(**kwargs)
    return ExperimentConfig(name=name, **tables)


def _resolve_data_path(raw: Dict[str, Any], base: Path) -> None:
    data = raw.get('data')
    if not isinstance(data, dict):
        return
    for key in ('path', 'cache_dir'):
        if isinstance(data.get(key), str) and data[key]:
            p = Path(data[key]).expanduser()
            if not p.is_absolute():
                resolved = (base / p).resolve()
                # An hf path may also name a data set in the Hugging Face cache.
                if not (data.get('dataset') == 'hf' and key == 'path' and not resolved.exists()):
                    data[key] = str(resolved)


def read_toml(path: PathLike) -> Dict[str, Any]:
    """Parses a TOML file into dicts (the one place TOML files are read).

    Raises:
        ConfigError: the file is missing, unreadable or not valid TOML.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding='utf-8')
    except FileNotFoundError:
        raise ConfigError(f'config file {p} does not exist', key='', value=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f'cannot read config file {p}: {e}', key='', value=str(p)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f'{p}: invalid TOML: {e}', key='', value=str(p)) from None


def load_config(path: PathLike) -> ExperimentConfig:
    """Reads and validates a TOML experiment file (the one place files are parsed).

    The experiment name defaults to the file stem. A relative ``data.path``
    is taken relative to the file's directory.

    Args:
        path: the .toml file.

    Returns:
        The validated config.

    Raises:
        ConfigError: the file is missing or not valid TOML, or its content
            is invalid (see `config_from_dict`).
    """
    p = Path(path)
    raw = read_toml(p)
    _resolve_data_path(raw, p.resolve().parent)
    try:
        return config_from_dict(raw, default_name=p.stem)
    except ConfigError as e:
        raise ConfigError(f'{p}: {e}', key=e.key, value=e.value) from None


# ----------------------------------------------------------------- overrides

def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (``2``, ``0.1``, ``true``, ``[1, 2]``,
    ``"a"``, ``{...}``), or else the text itself as a string (``process``)."""
    try:
        return tomllib.loads(f'v = {text}')['v']
    except tomllib.TOMLDecodeError:
        return text


def parse_override(item: str) -> Tuple[str, Any]:
    """Splits ``'key=value'`` and parses the value (see `parse_value`).

    Raises:
        ConfigError: no ``=``, or an unknown key (listing the valid keys).
    """
    if not isinstance(item, str) or '=' not in item:
        raise ConfigError(f'an override must look like key=value, got {item!r}',
                          key='', value=item)
    key, text = item.split('=', 1)
    key = key.strip()
    valid = valid_keys()
    if key not in valid:
        raise ConfigError(f'unknown key {key!r} in override {item!r}; valid keys: '
                          f'{", ".join(valid)}', key=key, value=text)
    return key, parse_value(text.strip())


def _assign(config: ExperimentConfig, assignments: Sequence[Tuple[str, Any]]
            ) -> ExperimentConfig:
    """Applies (dotted key, value) pairs to the resolved config and validates it."""
    d = config.to_dict()
    explicit: Dict[str, set] = {}
    for key, value in assignments:
        if key == 'name':
            d['name'] = value
            continue
        table, field = key.split('.', 1)
        if table == 'sweep':
            d['sweep'] = {'grid': value}
            continue
        d.setdefault(table, {})[field] = value
        explicit.setdefault(table, set()).add(field)
    for table, union in _UNIONS.items():
        old = getattr(getattr(config, table), union.TAG)
        new = d.get(table, {}).get(union.TAG, old)
        if new != old and isinstance(new, str) and new in union.VARIANTS:
            keep = set(_own_keys(union.VARIANTS[new])) | explicit.get(table, set())
            d[table] = {k: v for k, v in d[table].items() if k in keep}
    return config_from_dict(d)


def apply_overrides(config: ExperimentConfig, overrides: Sequence[str]) -> ExperimentConfig:
    """Applies ``--set key=value`` overrides.

    Values are TOML literals (a bare word is a string). Changing a
    discriminator (``data.dataset``, ``model.name``, ``stack.kind``) drops
    the keys that the new choice does not take, unless they are set in the
    same overrides. ``sweep.grid`` takes an inline table
    (``sweep.grid={"training.seed"=[0, 1]}``) and replaces the grid.

    Args:
        config: the base config.
        overrides: ``'key=value'`` strings, applied in order.

    Returns:
        The new, validated config.

    Raises:
        ConfigError: malformed override, unknown key (listing the valid
            ones) or an invalid resulting config.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    pairs = [parse_override(o) for o in overrides]
    return _assign(config, pairs) if pairs else config


def _fmt_run_value(v: Any) -> str:
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, (list, tuple)):
        return '-'.join(_fmt_run_value(x) for x in v)
    if isinstance(v, Mapping):
        return '-'.join(f'{k}-{_fmt_run_value(x)}' for k, x in v.items())
    return str(v)


def run_id_for(assignments: Sequence[Tuple[str, Any]]) -> str:
    """The run id of a set of (dotted key, value) assignments.

    ``[('stack.num_workers', 2), ('training.seed', 0)]`` ->
    ``'num_workers=2,seed=0'``: the last part of each key, or the whole key
    when two keys share their last part; characters other than letters,
    digits and ``. _ = , + -`` become ``_``. No assignments:
    `DEFAULT_RUN_ID`.
    """
    if not assignments:
        return DEFAULT_RUN_ID
    lasts = [k.rsplit('.', 1)[-1] for k, _ in assignments]
    parts = []
    for (key, value), last in zip(assignments, lasts):
        label = last if lasts.count(last) == 1 else key
        parts.append(f'{label}={_fmt_run_value(value)}')
    return _RUN_ID_SAFE.sub('_', ','.join(parts))


def expand_sweep(config: ExperimentConfig) -> List[Tuple[str, ExperimentConfig]]:
    """The runs of a config: one per point of the sweep grid (itertools.product order).

    Each run's config is the base config with the point's values assigned
    (see `apply_overrides` for discriminators) and an empty sweep. A config
    without a grid gives ``[(DEFAULT_RUN_ID, config)]``.

    Returns:
        ``[(run_id, config), ...]`` with deterministic, distinct run ids like
        ``'num_workers=2,clients_per_round=100,seed=0'``.

    Raises:
        ConfigError: a point gives an invalid config (the message names the
            run id), or two points give the same run id.
    """
    base = config.replace(sweep=SweepConfig())
    grid = config.sweep.grid
    if not grid:
        return [(DEFAULT_RUN_ID, base)]
    keys = [k for k, _ in grid]
    runs: List[Tuple[str, ExperimentConfig]] = []
    seen: Dict[str, Tuple[Any, ...]] = {}
    for point in itertools.product(*(values for _, values in grid)):
        assignments = list(zip(keys, point))
        run_id = run_id_for(assignments)
        if run_id in seen:
            raise ConfigError(f'sweep points {seen[run_id]} and {point} both get the run id '
                              f'{run_id!r}; make the values distinct', key='sweep.grid',
                              value=run_id)
        seen[run_id] = point
        try:
            runs.append((run_id, _assign(base, [(k, _thaw(v)) for k, v in assignments])))
        except ConfigError as e:
            raise ConfigError(f'sweep point {run_id}: {e}', key=e.key, value=e.value) from None
    return runs


# ------------------------------------------------------------------- writing

def dumps_toml(doc: Mapping[str, Any]) -> str:
    """Writes nested dicts of TOML values as TOML text (tomli-w; `read_toml` reads it back).

    Raises:
      ConfigError: a value TOML cannot hold (None, an object).
    """
    try:
        return tomli_w.dumps(doc)
    except (TypeError, ValueError) as e:
        raise ConfigError(f'cannot write the config as TOML: {e}', key='', value=None) from None
