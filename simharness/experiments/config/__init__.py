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

One module per table (`data`, `model`, `algorithm`, `training`,
`aggregator`, `stack`; the shared validators and `_Table` /
`_Union` in `base`), `experiment` (`ExperimentConfig`, ``[sweep]``, reading and
writing files) and `overrides` (``--set`` and sweep points); this package re-exports
their names, so ``from simharness.experiments.config import X`` keeps working.

Importing this package imports neither TensorFlow nor numpy.
"""

from __future__ import annotations

from simharness.experiments.config.base import (  # noqa: F401
    DEFAULT_RUN_ID,
    HF_PARTITIONS,
    SEQUENCE_DATASETS,
    PARTITIONS,
    ALGORITHMS,
    OPTIMIZERS,
    COHORTS,
    RAY_PLACEMENT_STRATEGIES,
    REFERENCE_NUM_CLIENTS,
    _RUN_ID_SAFE,
    _NAME_RE,
    _fmt_allowed,
    _check_int,
    _check_float,
    _check_bool,
    _check_choice,
    _check_str,
    _check_int_tuple,
    Check,
    _as_given,
    _int,
    _num,
    _choice,
    _ints,
    _opt,
    _require,
    _Table,
    _Union,
    _own_keys,
    table_keys,
    _check_keys,
    build_variant,
)
from simharness.experiments.config.data import (  # noqa: F401
    DataConfig,
    SyntheticData,
    DigitsData,
    FilesData,
    ReferenceData,
    EmnistData,
    Cifar100Data,
    ShakespeareData,
    StackOverflowData,
    HfData,
)
from simharness.experiments.config.model import (  # noqa: F401
    ModelConfig,
    LogregModel,
    MlpModel,
    CnnModel,
    KerasModel,
)
from simharness.experiments.config.algorithm import (  # noqa: F401
    AlgorithmConfig,
)
from simharness.experiments.config.training import (  # noqa: F401
    _check_availability,
    TrainingConfig,
)
from simharness.experiments.config.aggregator import (  # noqa: F401
    _agg_num,
    _agg_error,
    AggregatorConfig,
)
from simharness.experiments.config.stack import (  # noqa: F401
    StackConfig,
    ThreadStack,
    _check_devices,
    ProcessStack,
    _check_gpu_share,
    RayStack,
    check_stack_devices,
)
from simharness.experiments.config.experiment import (  # noqa: F401
    SweepConfig,
    _freeze,
    _flatten_grid,
    _TABLES,
    _UNIONS,
    _TOP_KEYS,
    DATASETS,
    MODEL_NAMES,
    STACK_KINDS,
    valid_keys,
    ExperimentConfig,
    _thaw,
    config_from_dict,
    _resolve_data_path,
    read_toml,
    load_config,
    dumps_toml,
)
from simharness.experiments.config.overrides import (  # noqa: F401
    parse_value,
    parse_override,
    _assign,
    apply_overrides,
    _fmt_run_value,
    run_id_for,
    expand_sweep,
)
from simharness.experiments.config.experiment import PathLike, tomllib  # noqa: F401

__all__ = [
    'ALGORITHMS',
    'AggregatorConfig',
    'AlgorithmConfig',
    'COHORTS',
    'Check',
    'Cifar100Data',
    'CnnModel',
    'DATASETS',
    'DEFAULT_RUN_ID',
    'DataConfig',
    'DigitsData',
    'EmnistData',
    'ExperimentConfig',
    'FilesData',
    'HF_PARTITIONS',
    'HfData',
    'KerasModel',
    'LogregModel',
    'MODEL_NAMES',
    'MlpModel',
    'ModelConfig',
    'OPTIMIZERS',
    'PARTITIONS',
    'ProcessStack',
    'RAY_PLACEMENT_STRATEGIES',
    'REFERENCE_NUM_CLIENTS',
    'RayStack',
    'ReferenceData',
    'SEQUENCE_DATASETS',
    'STACK_KINDS',
    'ShakespeareData',
    'StackConfig',
    'StackOverflowData',
    'SweepConfig',
    'SyntheticData',
    'ThreadStack',
    'TrainingConfig',
    'apply_overrides',
    'build_variant',
    'check_stack_devices',
    'config_from_dict',
    'dumps_toml',
    'expand_sweep',
    'load_config',
    'parse_override',
    'parse_value',
    'read_toml',
    'run_id_for',
    'table_keys',
    'valid_keys',
]
