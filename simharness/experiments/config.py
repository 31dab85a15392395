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

Some tables have a *discriminator* (``data.dataset``, ``model.name``,
``stack.kind``) that decides which other keys the table takes. When an
override or a sweep point changes a discriminator, the keys of the base
config that the new choice does not take are dropped (so
``--set stack.kind=thread`` works on a config that sets
``stack.num_workers``); keys set explicitly in the same override must fit.

Importing this module imports neither TensorFlow nor numpy.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import tomli_w

from simharness.errors import ConfigError, SimharnessError
from simharness.learning.aggregators import Aggregator
from simharness.runtime import pinning
from simharness.runtime.resources import GpuInventory

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PathLike = Union[str, Path]

#: Run id of an experiment without a sweep grid (and without overrides).
DEFAULT_RUN_ID = 'default'

DATASETS = ('cifar100', 'digits', 'emnist', 'files', 'hf', 'reference', 'shakespeare',
            'stackoverflow', 'synthetic')
HF_PARTITIONS = ('dirichlet', 'natural')
#: Data sets whose labels are sequences (next-token prediction): Keras models only.
SEQUENCE_DATASETS = ('shakespeare', 'stackoverflow')
PARTITIONS = ('dirichlet', 'iid')
MODEL_NAMES = ('cnn', 'keras', 'logreg', 'mlp')
#: As `simharness.learning.algorithms.ALGORITHM_NAMES` (not imported: no numpy here).
ALGORITHMS = ('fedadagrad', 'fedadam', 'fedavg', 'fedavgm', 'fedprox', 'fedsgd', 'fedyogi')
OPTIMIZERS = ('adagrad', 'adam', 'sgd', 'yogi')
COHORTS = ('random', 'reference', 'weighted', 'with_replacement')
STACK_KINDS = ('process', 'ray', 'thread')
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


def _apply_variant(obj: Any, table: str, discriminator: str,
                   options: Mapping[str, Mapping[str, Any]]) -> None:
    """Checks that only the options of the chosen variant are set; fills their defaults.

    `options` maps each value of the discriminator to ``{field: default}``
    (a default of None: optional, stays None when not given).
    """
    choice = getattr(obj, discriminator)
    allowed = options[choice]
    for f in dataclasses.fields(obj):
        if f.name == discriminator:
            continue
        value = getattr(obj, f.name)
        if f.name not in allowed:
            if value is not None:
                takers = [c for c in sorted(options) if f.name in options[c]]
                raise ConfigError(
                    f'{table}.{f.name} does not apply to {table}.{discriminator} = {choice!r} '
                    f'(its options: {", ".join(sorted(allowed)) or "none"}; {f.name} is an option '
                    f'of {discriminator} {_fmt_allowed(takers)})',
                    key=f'{table}.{f.name}', value=value)
            continue
        if value is None and allowed[f.name] is not None:
            object.__setattr__(obj, f.name, allowed[f.name])


# ---------------------------------------------------------------------- tables

_DATA_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    'synthetic': {'num_clients': 20, 'alpha': 1.0, 'beta': 1.0, 'samples_per_client': 50,
                  'dim': 60, 'num_classes': 10, 'iid': False, 'seed': 0},
    'digits': {'num_clients': 20, 'partition': 'dirichlet', 'dirichlet_alpha': 0.5,
               'test_fraction': 0.2, 'min_size': 5, 'seed': 0},
    'files': {'path': None, 'x_key': 'x', 'y_key': 'y', 'client_id_key': 'client_id',
              'num_classes': None},
    'reference': {},
    'emnist': {'cache_dir': None, 'only_digits': False, 'max_clients': None},
    'cifar100': {'cache_dir': None, 'max_clients': None},
    'shakespeare': {'cache_dir': None, 'sequence_length': 80, 'max_clients': None},
    'stackoverflow': {'cache_dir': None, 'sequence_length': 20, 'vocab_size': 10000,
                      'max_clients': None},
    'hf': {'path': None, 'x_key': 'x', 'y_key': 'y', 'client_id_key': None, 'hf_split': None,
           'partition': 'natural', 'num_clients': 20, 'dirichlet_alpha': 0.5, 'min_size': 1,
           'seed': 0, 'cache_dir': None, 'num_classes': None},
}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``[data]``: the federated data set.

    Attributes:
        dataset: ``'synthetic'`` (Synthetic(alpha, beta) of FedProx),
            ``'digits'`` (scikit-learn digits split over clients, with a
            held-out test set), ``'files'`` (a directory of
            ``<client_id>.npz`` files, or one .npz / .csv file with a client
            id column) or ``'reference'`` (exactly the 1000-client
            Synthetic(1, 1) of benchmarks/fedavg-synthetic-mlp.md; no
            options).
        num_clients: synthetic, digits: number of clients (default 20).
        alpha: synthetic: std of the per-client model mean (default 1.0).
        beta: synthetic: std of the per-client input mean (default 1.0).
        samples_per_client: synthetic: samples per client (default 50).
        dim: synthetic: input dimension (default 60).
        num_classes: synthetic: number of classes (default 10); files:
            optional (default: largest label + 1).
        iid: synthetic: the FedProx "Synthetic IID" variant (default false).
        partition: digits: ``'dirichlet'`` (label skew, default) or ``'iid'``.
        dirichlet_alpha: digits: Dirichlet concentration (default 0.5; used
            by the 'dirichlet' partition only).
        test_fraction: digits: held-out test fraction (default 0.2).
        min_size: digits: smallest client (default 5).
        seed: synthetic, digits: data seed (default 0).
        path: files: the directory or file (relative paths are relative to
            the config file when loaded with `load_config`).
        x_key: files: feature array / column name (default 'x').
        y_key: files: label array / column name (default 'y').
        client_id_key: files: client id array / column of a single file
            (default 'client_id'); hf: the natural client id column.
        cache_dir: emnist, cifar100, shakespeare, stackoverflow: the
            directory holding TFF's published file (SQLite or HDF5; see
            `simharness.data.benchmarks`; nothing is downloaded); hf: the
            Hugging Face cache directory (optional).
        only_digits: emnist: the 10-class digits-only variant (default false).
        max_clients: emnist, cifar100, shakespeare, stackoverflow: keep the
            first N clients (sorted ids) of the train split (default: all).
        sequence_length: shakespeare (80), stackoverflow (20): tokens per example.
        vocab_size: stackoverflow: most frequent words kept (default 10000).
        hf_split: hf: the split of a saved DatasetDict (e.g. 'train').
        partition (hf): 'natural' (one client per client_id_key value,
            default) or 'dirichlet' (num_clients, dirichlet_alpha, min_size, seed).
        path (hf): a directory written by save_to_disk, or a data set name in
            the local Hugging Face cache.
    """

    dataset: str = 'synthetic'
    num_clients: Optional[int] = None
    alpha: Optional[float] = None
    beta: Optional[float] = None
    samples_per_client: Optional[int] = None
    dim: Optional[int] = None
    num_classes: Optional[int] = None
    iid: Optional[bool] = None
    partition: Optional[str] = None
    dirichlet_alpha: Optional[float] = None
    test_fraction: Optional[float] = None
    min_size: Optional[int] = None
    seed: Optional[int] = None
    path: Optional[str] = None
    x_key: Optional[str] = None
    y_key: Optional[str] = None
    client_id_key: Optional[str] = None
    cache_dir: Optional[str] = None
    only_digits: Optional[bool] = None
    max_clients: Optional[int] = None
    sequence_length: Optional[int] = None
    vocab_size: Optional[int] = None
    hf_split: Optional[str] = None

    def __post_init__(self) -> None:
        _check_choice('data.dataset', self.dataset, DATASETS)
        _apply_variant(self, 'data', 'dataset', _DATA_OPTIONS)
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        if self.num_clients is not None:
            s('num_clients', _check_int('data.num_clients', self.num_clients, 1))
        for key in ('alpha', 'beta'):
            if getattr(self, key) is not None:
                s(key, _check_float(f'data.{key}', getattr(self, key), minimum=0.0))
        for key, minimum in (('samples_per_client', 1), ('dim', 1), ('num_classes', 2),
                             ('min_size', 1), ('seed', 0)):
            if getattr(self, key) is not None:
                s(key, _check_int(f'data.{key}', getattr(self, key), minimum))
        if self.iid is not None:
            _check_bool('data.iid', self.iid)
        if self.partition is not None:
            _check_choice('data.partition', self.partition,
                          HF_PARTITIONS if self.dataset == 'hf' else PARTITIONS)
        for key in ('max_clients', 'sequence_length', 'vocab_size'):
            if getattr(self, key) is not None:
                s(key, _check_int(f'data.{key}', getattr(self, key), 1))
        if self.only_digits is not None:
            _check_bool('data.only_digits', self.only_digits)
        for key in ('cache_dir', 'hf_split'):
            if getattr(self, key) is not None:
                _check_str(f'data.{key}', getattr(self, key))
        if self.dataset in ('emnist', 'cifar100', 'shakespeare', 'stackoverflow') and \
                self.cache_dir is None:
            raise ConfigError(f'data.cache_dir is required for data.dataset = {self.dataset!r} '
                              "(the directory with TFF's published file; nothing is downloaded)",
                              key='data.cache_dir', value=None)
        if self.dataset == 'hf':
            if self.path is None:
                raise ConfigError("data.path is required for data.dataset = 'hf' (a "
                                  'save_to_disk directory or a locally cached data set name)',
                                  key='data.path', value=None)
            if self.partition == 'natural' and self.client_id_key is None:
                raise ConfigError("data.client_id_key is required for data.partition = "
                                  "'natural' (the column naming each example's client)",
                                  key='data.client_id_key', value=None)
        if self.dirichlet_alpha is not None:
            s('dirichlet_alpha', _check_float('data.dirichlet_alpha', self.dirichlet_alpha,
                                              minimum=0.0, inclusive=False))
        if self.test_fraction is not None:
            s('test_fraction', _check_float('data.test_fraction', self.test_fraction,
                                            minimum=0.0, below=1.0))
        for key in ('x_key', 'y_key', 'client_id_key'):
            if getattr(self, key) is not None:
                _check_str(f'data.{key}', getattr(self, key))
        if self.dataset == 'files':
            if self.path is None:
                raise ConfigError("data.path is required for data.dataset = 'files' (a directory "
                                  'of <client_id>.npz files, or one .npz / .csv file)',
                                  key='data.path', value=None)
            _check_str('data.path', self.path)
            if len({self.x_key, self.y_key, self.client_id_key}) != 3:
                raise ConfigError(
                    f'data.x_key, data.y_key and data.client_id_key must differ, got '
                    f'{self.x_key!r}, {self.y_key!r}, {self.client_id_key!r}',
                    key='data.y_key', value=self.y_key)

    @property
    def known_num_clients(self) -> Optional[int]:
        """The number of clients if the config tells it (not for 'files')."""
        if self.dataset == 'reference':
            return REFERENCE_NUM_CLIENTS
        if self.dataset == 'hf' and self.partition == 'natural':
            return None
        return self.num_clients


_MODEL_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    'logreg': {},
    'mlp': {'hidden_sizes': (256, 256)},
    'cnn': {'conv_filters': (16, 32), 'kernel_size': 3, 'pool_size': 2},
    'keras': {'keras': None},
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """``[model]``: the architecture (see `simharness.learning.models`).

    The input shape and number of classes come from the data. Initial
    weights are ``init_weights(model, training.seed)``; for the reference
    dataset they are the benchmark's (``init_weights(model, 1)``, which is
    ``reference_mlp_init()`` for the default mlp).

    Attributes:
        name: ``'mlp'`` (default), ``'logreg'`` or ``'cnn'`` (digits only:
            8x8x1 images).
        hidden_sizes: mlp: widths of the hidden layers (default [256, 256]).
        conv_filters: cnn: filters of the two conv layers (default [16, 32]).
        kernel_size: cnn: conv kernel side (default 3).
        pool_size: cnn: max-pool side (default 2).
        keras: keras: ``"package.module:function"``, a function
            ``(input_shape, num_classes) -> keras.Model`` (its compiled
            loss, else sparse categorical cross-entropy from logits; metric:
            accuracy); initial weights: ``keras.utils.set_random_seed(seed)``
            then a fresh build. Required for name = 'keras'.
    """

    name: str = 'mlp'
    hidden_sizes: Optional[Tuple[int, ...]] = None
    conv_filters: Optional[Tuple[int, ...]] = None
    kernel_size: Optional[int] = None
    pool_size: Optional[int] = None
    keras: Optional[str] = None

    def __post_init__(self) -> None:
        _check_choice('model.name', self.name, MODEL_NAMES)
        _apply_variant(self, 'model', 'name', _MODEL_OPTIONS)
        if self.name == 'keras':
            if self.keras is None:
                raise ConfigError('model.keras is required for model.name = "keras" (a '
                                  '"package.module:function" building the keras.Model)',
                                  key='model.keras', value=None)
            if not isinstance(self.keras, str) or self.keras.count(':') != 1 or not all(
                    self.keras.split(':')):
                raise ConfigError(f'model.keras must look like "package.module:function", got '
                                  f'{self.keras!r}', key='model.keras', value=self.keras)
        if self.hidden_sizes is not None:
            object.__setattr__(self, 'hidden_sizes',
                               _check_int_tuple('model.hidden_sizes', self.hidden_sizes))
        if self.conv_filters is not None:
            object.__setattr__(self, 'conv_filters',
                               _check_int_tuple('model.conv_filters', self.conv_filters, 2))
        for key in ('kernel_size', 'pool_size'):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _check_int(f'model.{key}', getattr(self, key), 1))

    def options(self) -> Dict[str, Any]:
        """The keyword options of `simharness.learning.get_model` for this model."""
        return {k: getattr(self, k) for k in _MODEL_OPTIONS[self.name]}


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    """``[algorithm]``: the federated algorithm and its hyper-parameters.

    Attributes:
        name: ``'fedavg'`` (default), ``'fedavgm'`` (server SGD with
            momentum, 0.9 unless server_momentum is set), ``'fedadam'``,
            ``'fedyogi'``, ``'fedadagrad'`` (adaptive server optimizers),
            ``'fedprox'`` or ``'fedsgd'`` (see
            `simharness.learning.algorithms.build_algorithm`).
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

    name: str = 'fedavg'
    client_learning_rate: float = 0.05
    local_epochs: int = 1
    batch_size: int = 10
    server_learning_rate: float = 1.0
    server_momentum: float = 0.0
    client_optimizer: str = 'sgd'
    client_momentum: float = 0.0
    server_optimizer: Optional[str] = None
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: Optional[float] = None
    proximal_strength: float = 0.01

    def __post_init__(self) -> None:
        _check_choice('algorithm.name', self.name, ALGORITHMS)
        _check_choice('algorithm.client_optimizer', self.client_optimizer, OPTIMIZERS)
        if self.server_optimizer is not None:
            _check_choice('algorithm.server_optimizer', self.server_optimizer, OPTIMIZERS)
        for key in ('client_momentum', 'beta_1', 'beta_2'):
            object.__setattr__(self, key, _check_float(f'algorithm.{key}', getattr(self, key),
                                                       minimum=0.0, below=1.0))
        if self.epsilon is not None:
            object.__setattr__(self, 'epsilon', _check_float('algorithm.epsilon', self.epsilon,
                                                             minimum=0.0, inclusive=False))
        object.__setattr__(self, 'proximal_strength', _check_float(
            'algorithm.proximal_strength', self.proximal_strength, minimum=0.0, inclusive=False))
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        for key in ('client_learning_rate', 'server_learning_rate'):
            s(key, _check_float(f'algorithm.{key}', getattr(self, key), minimum=0.0,
                                inclusive=False))
        for key in ('local_epochs', 'batch_size'):
            s(key, _check_int(f'algorithm.{key}', getattr(self, key), 1))
        s('server_momentum', _check_float('algorithm.server_momentum', self.server_momentum,
                                          minimum=0.0, below=1.0))


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
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

    rounds: int = 10
    clients_per_round: int = 10
    seed: int = 0
    eval_every: int = 1
    cohort: str = 'random'
    availability: float = 1.0
    checkpoint_every: int = 10
    early_stopping_metric: str = 'eval_loss'
    early_stopping_patience: int = 0
    tensorboard: bool = True
    federated_eval: bool = False

    def __post_init__(self) -> None:
        _check_int('training.rounds', self.rounds, 1)
        _check_int('training.clients_per_round', self.clients_per_round, 1)
        _check_int('training.seed', self.seed, 0)
        _check_int('training.eval_every', self.eval_every, 0)
        _check_choice('training.cohort', self.cohort, COHORTS)
        a = _check_float('training.availability', self.availability, minimum=0.0,
                         inclusive=False)
        if a > 1.0:
            raise ConfigError(f'training.availability must be in (0, 1], got {a}',
                              key='training.availability', value=a)
        object.__setattr__(self, 'availability', a)
        _check_int('training.checkpoint_every', self.checkpoint_every, 0)
        _check_str('training.early_stopping_metric', self.early_stopping_metric)
        _check_int('training.early_stopping_patience', self.early_stopping_patience, 0)
        _check_bool('training.tensorboard', self.tensorboard)
        _check_bool('training.federated_eval', self.federated_eval)

    def evaluates_after(self, round_num: int) -> bool:
        """Whether central evaluation runs after round `round_num` (0-based)."""
        if round_num == self.rounds - 1:
            return True
        return self.eval_every > 0 and (round_num + 1) % self.eval_every == 0


@dataclasses.dataclass(frozen=True)
class AggregatorConfig:
    """``[aggregator]``: how client updates are combined (`simharness.learning.aggregators`).

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
        quantize_bits: stochastic quantization to this many bits (1..16).
        quantize_range: the quantization range [-R, R] (default: clip).
        secure: sum the quantized updates with federated_secure_sum_bitwidth.
        seed: seed of the DP noise (default 0).
    """

    weighted: bool = True
    clip: Optional[float] = None
    adaptive_clip: bool = False
    target_quantile: float = 0.5
    clip_learning_rate: float = 0.2
    noise_multiplier: float = 0.0
    clipped_count_stddev: Optional[float] = None
    dp_delta: float = 1e-5
    quantize_bits: Optional[int] = None
    quantize_range: Optional[float] = None
    secure: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ('weighted', 'adaptive_clip', 'secure'):
            _check_bool(f'aggregator.{key}', getattr(self, key))
        _check_float('aggregator.dp_delta', self.dp_delta, minimum=0.0, inclusive=False,
                     below=1.0)
        _check_int('aggregator.seed', self.seed, 0)
        self.build(clients_per_round=1)  # every other check (names the key)

    def build(self, clients_per_round: int) -> Any:
        """The `simharness.learning.aggregators.Aggregator` of this table."""
        try:
            return Aggregator(
                weighted=self.weighted, clip=self.clip, adaptive=self.adaptive_clip,
                target_quantile=self.target_quantile, clip_learning_rate=self.clip_learning_rate,
                noise_multiplier=self.noise_multiplier,
                clients_per_round=clients_per_round if self.noise_multiplier > 0 else None,
                clipped_count_stddev=self.clipped_count_stddev, quantize_bits=self.quantize_bits,
                quantize_range=self.quantize_range, secure=self.secure, seed=self.seed)
        except ConfigError as e:
            key = f'aggregator.{e.key}' if e.key else 'aggregator'
            raise ConfigError(f'{key}: {e}', key=key, value=e.value) from None


_STACK_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    'thread': {'clients_per_thread': 1},
    'process': {'num_workers': None, 'clients_per_worker': 256, 'cpu_affinity': True,
                'devices': None, 'workers_per_gpu': 1},
    'ray': {'address': None, 'num_workers': None, 'clients_per_worker': 256, 'cpu_affinity': True,
            'num_cpus_per_worker': 1, 'num_gpus_per_worker': 0, 'placement_strategy': 'PACK'},
}


@dataclasses.dataclass(frozen=True)
class StackConfig:
    """``[stack]``: where the clients run.

    Attributes:
        kind: ``'thread'`` (`local_executor_factory`, default),
            ``'process'`` (`process_executor_factory`: pinned worker
            processes) or ``'ray'`` (`ray_executor_factory`: Ray actors, on
            this machine or a cluster).
        address: ray: the cluster to join (``'auto'``, ``'host:6379'``,
            ``'ray://host:10001'``; default: start a local Ray).
        clients_per_thread: thread: clients per client thread (default 1).
        num_workers: process: worker processes (default: one per usable
            core, or per GPU slot when `devices` names GPUs).
        clients_per_worker: process: most clients per TF call in a worker
            (default 256).
        cpu_affinity: process: pin each worker to its own cores (default
            true).
        devices: process: GPUs to use ('cuda:0', [0, 1], ...; default: CPU).
        workers_per_gpu: process: workers sharing a GPU (default 1).
        num_cpus_per_worker: ray: CPUs reserved per actor (default 1).
        num_gpus_per_worker: ray: GPUs per actor, 0 .. 1 (default 0).
        placement_strategy: ray: 'PACK' (default), 'SPREAD', 'STRICT_PACK'
            or 'STRICT_SPREAD'.
    """

    kind: str = 'thread'
    clients_per_thread: Optional[int] = None
    num_workers: Optional[int] = None
    clients_per_worker: Optional[int] = None
    cpu_affinity: Optional[bool] = None
    devices: Optional[Union[str, Tuple[Union[int, str], ...]]] = None
    workers_per_gpu: Optional[int] = None
    address: Optional[str] = None
    num_cpus_per_worker: Optional[float] = None
    num_gpus_per_worker: Optional[float] = None
    placement_strategy: Optional[str] = None

    def __post_init__(self) -> None:
        _check_choice('stack.kind', self.kind, STACK_KINDS)
        _apply_variant(self, 'stack', 'kind', _STACK_OPTIONS)
        if self.address is not None:
            _check_str('stack.address', self.address)
        if self.num_cpus_per_worker is not None:
            _check_float('stack.num_cpus_per_worker', self.num_cpus_per_worker, minimum=0,
                         inclusive=False)
        if self.num_gpus_per_worker is not None:
            _check_float('stack.num_gpus_per_worker', self.num_gpus_per_worker, minimum=0)
            if self.num_gpus_per_worker > 1:
                raise ConfigError('stack.num_gpus_per_worker must be a number in [0, 1] (a '
                                  f'worker uses one GPU), got {self.num_gpus_per_worker!r}',
                                  key='stack.num_gpus_per_worker',
                                  value=self.num_gpus_per_worker)
        if self.placement_strategy is not None:
            _check_choice('stack.placement_strategy', self.placement_strategy,
                          RAY_PLACEMENT_STRATEGIES)
        for key in ('clients_per_thread', 'num_workers', 'clients_per_worker', 'workers_per_gpu'):
            if getattr(self, key) is not None:
                _check_int(f'stack.{key}', getattr(self, key), 1)
        if self.cpu_affinity is not None:
            _check_bool('stack.cpu_affinity', self.cpu_affinity)
        d = self.devices
        if d is not None:
            if isinstance(d, (list, tuple)):
                if not d or not all((isinstance(v, int) and not isinstance(v, bool) and v >= 0)
                                    or (isinstance(v, str) and v) for v in d):
                    raise ConfigError(
                        f'stack.devices must be a string like "cuda:0" or a non-empty list of GPU '
                        f'ids (ints >= 0) or device strings, got {d!r}', key='stack.devices',
                        value=d)
                object.__setattr__(self, 'devices', tuple(d))
            elif not isinstance(d, str) or not d:
                raise ConfigError(
                    f'stack.devices must be a string like "cuda:0" or a list of GPU ids, got '
                    f'{d!r}', key='stack.devices', value=d)
            try:
                pinning.parse_devices(list(self.devices) if isinstance(self.devices, tuple)
                                      else self.devices)
            except SimharnessError as e:
                raise ConfigError(f'stack.devices: {e}', key='stack.devices', value=d) from e


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
    if stack.kind != 'process' or stack.devices is None:
        return
    devices = list(stack.devices) if isinstance(stack.devices, tuple) else stack.devices
    try:
        pinning.check_gpus_exist(devices, pinning.parse_devices(devices) or (), inventory,
                                 name='stack.devices')
    except SimharnessError as e:
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
_DISCRIMINATORS = {'data': 'dataset', 'model': 'name', 'stack': 'kind'}
_VARIANT_OPTIONS = {'data': _DATA_OPTIONS, 'model': _MODEL_OPTIONS, 'stack': _STACK_OPTIONS}
_TOP_KEYS = ('name',) + tuple(_TABLES)


def valid_keys(include_sweep: bool = True) -> List[str]:
    """Every dotted key a config (or an override) may set, in table order."""
    keys = ['name']
    for table, cls in _TABLES.items():
        if table == 'sweep' and not include_sweep:
            continue
        keys += [f'{table}.{f.name}' for f in dataclasses.fields(cls)]
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
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in body:
            if key not in allowed:
                raise ConfigError(
                    f'unknown key {table}.{key}; allowed keys in [{table}]: '
                    f'{", ".join(allowed)}', key=f'{table}.{key}', value=body[key])
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
    for table, disc in _DISCRIMINATORS.items():
        old = getattr(getattr(config, table), disc)
        new = d.get(table, {}).get(disc, old)
        if new != old and isinstance(new, str) and new in _VARIANT_OPTIONS[table]:
            keep = set(_VARIANT_OPTIONS[table][new]) | explicit.get(table, set()) | {disc}
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
