"""`ExperimentConfig` (every table), ``[sweep]`` (`SweepConfig`: a grid of overrides over the
other tables' keys), reading a config (`config_from_dict`, `read_toml`, `load_config`) and
writing it (`to_toml`, `dumps_toml`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import tomli_w

from simharness.errors import ConfigError
from simharness.experiments.config.base import (
    _check_keys,
    _fmt_allowed,
    _NAME_RE,
    SEQUENCE_DATASETS,
    table_keys,
    _Union,
)
from simharness.experiments.config.data import DataConfig
from simharness.experiments.config.model import ModelConfig
from simharness.experiments.config.algorithm import AlgorithmConfig
from simharness.experiments.config.training import TrainingConfig
from simharness.experiments.config.aggregator import AggregatorConfig
from simharness.experiments.config.stack import StackConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PathLike = Union[str, Path]


# [sweep] (its keys are every other table's: `valid_keys`) ---------------------------


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
            raise ConfigError(
                f'sweep.grid must be a table of dotted keys to lists, got {grid!r}',
                key='sweep.grid',
                value=grid,
            )
        out = []
        seen = set()
        valid = [k for k in valid_keys(include_sweep=False) if k != 'name']
        for item in grid:
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise ConfigError(
                    f'sweep.grid entries must be (key, values) pairs, got {item!r}',
                    key='sweep.grid',
                    value=item,
                )
            key, values = item
            if key not in valid:
                raise ConfigError(
                    f'sweep.grid: unknown key {key!r}; valid keys: {", ".join(valid)}',
                    key=f'sweep.grid.{key}',
                    value=values,
                )
            if key in seen:
                raise ConfigError(
                    f'sweep.grid: key {key!r} appears twice', key=f'sweep.grid.{key}', value=values
                )
            seen.add(key)
            if not isinstance(values, (list, tuple)) or not values:
                raise ConfigError(
                    f'sweep.grid.{key} must be a non-empty list of values, got {values!r}',
                    key=f'sweep.grid.{key}',
                    value=values,
                )
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
    'data': DataConfig,
    'model': ModelConfig,
    'algorithm': AlgorithmConfig,
    'aggregator': AggregatorConfig,
    'training': TrainingConfig,
    'stack': StackConfig,
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
                f'results directory), got {self.name!r}',
                key='name',
                value=self.name,
            )
        for table, cls in _TABLES.items():
            if not isinstance(getattr(self, table), cls):
                raise ConfigError(
                    f'[{table}] must be a {cls.__name__}, got '
                    f'{type(getattr(self, table)).__name__}',
                    key=table,
                )
        n = self.data.known_num_clients
        k = self.training.clients_per_round
        if n is not None and k > n:
            raise ConfigError(
                f'training.clients_per_round = {k} is more than the {n} clients of the data '
                f'(data.num_clients)',
                key='training.clients_per_round',
                value=k,
            )
        if self.data.dataset in SEQUENCE_DATASETS and self.model.name != 'keras':
            raise ConfigError(
                f'data.dataset = {self.data.dataset!r} is next-token prediction (sequence '
                f'labels): it needs model.name = "keras" with a sequence model, not '
                f'{self.model.name!r}',
                key='model.name',
                value=self.model.name,
            )
        if self.model.name == 'cnn' and self.data.dataset in ('synthetic', 'reference'):
            raise ConfigError(
                f"model.name = 'cnn' needs image data (data.dataset 'digits' or 'files' with "
                f'[H, W, C] examples), not data.dataset = {self.data.dataset!r}',
                key='model.name',
                value='cnn',
            )

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
            out[table] = {
                f.name: _thaw(getattr(obj, f.name))
                for f in dataclasses.fields(obj)
                if getattr(obj, f.name) is not None
            }
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


def config_from_dict(
    raw: Mapping[str, Any], default_name: Optional[str] = None
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
                key=str(key),
                value=raw[key],
            )
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
