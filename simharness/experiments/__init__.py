"""The experiment layer: TOML configs, runs and sweeps with resumable results, reports.

::

    configs/*.toml, experiments/*.toml
        -> load_config / apply_overrides / expand_sweep      (config/: one module per table,
                                                              experiment, overrides; no TensorFlow)
        -> run_experiment / run_sweep                        (runner/: rundir, environment,
                                                              workload, rounds)
             the config's tff.learning process                (processes.py)
             results/<name>/<run-id>/{config.toml, environment.json, metrics.jsonl, summary.json,
                                      run.log, checkpoints/, tensorboard/, final_weights.npz}
        -> write_report                                      (report.py)
             report.md + PNG plots + runs.csv / rounds.csv (pandas)
    checkpoints.py: checkpoints, saved weights, callbacks (EarlyStopping, BestModel), TensorBoard

The command line (`simharness run | sweep | report`) is `simharness.cli`.
Importing this package imports neither TensorFlow nor matplotlib.
"""

from simharness.experiments.checkpoints import BestModel, Callback, EarlyStopping
from simharness.experiments.config import (
    DEFAULT_RUN_ID,
    AggregatorConfig,
    AlgorithmConfig,
    DataConfig,
    ExperimentConfig,
    ModelConfig,
    StackConfig,
    SweepConfig,
    TrainingConfig,
    apply_overrides,
    config_from_dict,
    expand_sweep,
    load_config,
    parse_override,
    run_id_for,
    valid_keys,
)
from simharness.experiments.report import load_runs, write_report
from simharness.experiments.runner import (
    RunResult,
    collect_environment,
    is_finished,
    run_experiment,
    run_sweep,
)

__all__ = [
    'AggregatorConfig',
    'BestModel',
    'Callback',
    'EarlyStopping',
    'DEFAULT_RUN_ID',
    'AlgorithmConfig',
    'DataConfig',
    'ExperimentConfig',
    'ModelConfig',
    'RunResult',
    'StackConfig',
    'SweepConfig',
    'TrainingConfig',
    'apply_overrides',
    'collect_environment',
    'config_from_dict',
    'expand_sweep',
    'is_finished',
    'load_config',
    'load_runs',
    'parse_override',
    'run_experiment',
    'run_id_for',
    'run_sweep',
    'valid_keys',
    'write_report',
]
