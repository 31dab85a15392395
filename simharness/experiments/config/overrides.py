"""``--set key=value`` overrides (`apply_overrides`) and sweep points (`expand_sweep`,
`run_id_for`): values assigned to the resolved config, which is validated again."""

from __future__ import annotations

import itertools
import sys
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from simharness.errors import ConfigError
from simharness.experiments.config.base import DEFAULT_RUN_ID, _own_keys, _RUN_ID_SAFE
from simharness.experiments.config.experiment import (
    config_from_dict,
    ExperimentConfig,
    SweepConfig,
    _thaw,
    _UNIONS,
    valid_keys,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


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
        raise ConfigError(f'an override must look like key=value, got {item!r}', key='', value=item)
    key, text = item.split('=', 1)
    key = key.strip()
    valid = valid_keys()
    if key not in valid:
        raise ConfigError(
            f'unknown key {key!r} in override {item!r}; valid keys: {", ".join(valid)}',
            key=key,
            value=text,
        )
    return key, parse_value(text.strip())


def _assign(config: ExperimentConfig, assignments: Sequence[Tuple[str, Any]]) -> ExperimentConfig:
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
            raise ConfigError(
                f'sweep points {seen[run_id]} and {point} both get the run id '
                f'{run_id!r}; make the values distinct',
                key='sweep.grid',
                value=run_id,
            )
        seen[run_id] = point
        try:
            runs.append((run_id, _assign(base, [(k, _thaw(v)) for k, v in assignments])))
        except ConfigError as e:
            raise ConfigError(f'sweep point {run_id}: {e}', key=e.key, value=e.value) from None
    return runs
