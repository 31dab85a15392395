"""Helpers shared by the experiment integration tests (tiny, fast configs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List


from simharness.experiments import atomic
from simharness.experiments.config import ExperimentConfig, _assign, config_from_dict
from simharness.experiments.runner import TIMING_FIELDS

#: A few clients, 2 rounds, a small MLP: seconds per run on the thread stack.
TINY: Dict[str, Any] = {
    'name': 'tiny',
    'data': {
        'dataset': 'synthetic',
        'num_clients': 6,
        'samples_per_client': 10,
        'dim': 5,
        'num_classes': 3,
        'seed': 0,
    },
    'model': {'name': 'mlp', 'hidden_sizes': [8]},
    'algorithm': {'batch_size': 5, 'client_learning_rate': 0.1},
    'training': {'rounds': 2, 'clients_per_round': 4, 'seed': 0, 'eval_every': 1},
    'stack': {'kind': 'thread'},
}

#: For the cross-stack checks: 40 clients per round, so that aggregations fold
#: whole chunks of 16 clients and split them over workers.
REPRO: Dict[str, Any] = {
    **TINY,
    'name': 'repro',
    'data': {**TINY['data'], 'num_clients': 48},
    'training': {'rounds': 2, 'clients_per_round': 40, 'seed': 3, 'eval_every': 1},
}

#: Every metric that depends only on the math (not on timing or memory).
MATH_FIELDS = (
    'round',
    'loss',
    'accuracy',
    'num_examples',
    'clients',
    'eval_loss',
    'eval_accuracy',
    'weights_sha256',
)


def make_config(base: Dict[str, Any] = TINY, **tables: Any) -> ExperimentConfig:
    """`base` with some keys changed, as overrides would (``stack={'kind': 'process'}``
    drops the thread options; ``name='x'`` renames)."""
    assignments = []
    for table, changes in tables.items():
        if isinstance(changes, dict) and table != 'sweep':
            assignments += [(f'{table}.{k}', v) for k, v in changes.items()]
        elif table == 'sweep':
            assignments.append(('sweep.grid', changes['grid']))
        else:
            assignments.append((table, changes))
    return _assign(config_from_dict(base), assignments)


def read_metrics(run_dir: Path) -> List[Dict[str, Any]]:
    lines = (Path(run_dir) / 'metrics.jsonl').read_text(encoding='utf-8').splitlines()
    return [json.loads(line) for line in lines]


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding='utf-8'))


def math_only(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows without timing, bytes and RSS fields."""
    assert set(TIMING_FIELDS) | set(MATH_FIELDS) == set(rows[0]), sorted(rows[0])
    return [{k: r[k] for k in MATH_FIELDS} for r in rows]


def temp_files(root: Path) -> List[Path]:
    return [p for p in Path(root).rglob('*') if atomic.is_temp_file(p)]
