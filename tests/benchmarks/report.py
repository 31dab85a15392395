"""Prints the results tables of docs/benchmarks.md from a saved pytest-benchmark JSON.

    python tests/benchmarks/report.py tests/benchmarks/baselines/<platform>/NNNN_<machine>.json
    python tests/benchmarks/report.py --history [tests/benchmarks/history/runs]

The second form prints the history overview of the project's benchmarks (a row per commit, the
median round time per benchmark, detected steps marked; see `simharness bench history`).

Medians, and the ratios the benchmarks put in extra_info. Missing cases print as '—'.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, Optional

STACKS = ('thread', 'process-1', 'process-2')
HISTORY = 'tests/benchmarks/history/runs'


def _load(path: str) -> Dict[str, Dict[str, Any]]:
    with open(path) as f:
        data = json.load(f)
    return {b['name']: b for b in data['benchmarks']}


def _fmt(value: Optional[float], spec: str) -> str:
    return '—' if value is None else format(value, spec)


def tables(b: Dict[str, Dict[str, Any]]) -> str:
    def median(name: str) -> Optional[float]:
        return b[name]['stats']['median'] if name in b else None

    def extra(name: str, key: str) -> Optional[float]:
        return b[name]['extra_info'].get(key) if name in b else None

    out = [
        '| case | size | baseline | thread | process-1 | process-2 |',
        '|---|---|---|---|---|---|',
    ]
    for n in (10, 100, 1000, 10_000):
        cells = [
            f'{_fmt(extra(f"test_map_sum[{n}-{s}]", "ms_per_client"), ".3f")} '
            f'({_fmt(extra(f"test_map_sum[{n}-{s}]", "ratio_to_single_process_tf"), ".3f")})'
            for s in STACKS
        ]
        out.append(
            f'| map_sum: ms per client (ratio to plain TF) | {n:,} clients | '
            f'{_fmt(extra(f"test_map_sum_plain_tf[{n}]", "ms_per_client"), ".3f")} | '
            + ' | '.join(cells)
            + ' |'
        )
    for mb in (1, 16, 128):
        memcpy = median(f'test_memcpy[{mb}]')
        cells = []
        for s in STACKS:
            name = f'test_broadcast_aggregate[{mb}-{s}]'
            t = median(name)
            cells.append(
                f'{_fmt(t and t * 1e3, ".1f")} '
                f'({_fmt(extra(name, "fraction_of_memcpy_bandwidth"), ".3f")})'
            )
        out.append(
            f'| broadcast + aggregate: ms (fraction of memcpy bandwidth) | {mb} MB | '
            f'{_fmt(memcpy and memcpy * 1e3, ".2f")} | ' + ' | '.join(cells) + ' |'
        )
    one, two = (
        median('test_fedavg_round_plain_tf_1proc'),
        median('test_fedavg_round_plain_tf_2proc'),
    )
    cells = [
        f'{_fmt(median(f"test_fedavg_round[{s}]"), ".3f")} '
        f'({_fmt(extra(f"test_fedavg_round[{s}]", "ratio_to_single_process_tf"), ".2f")} / '
        f'{_fmt(extra(f"test_fedavg_round[{s}]", "ratio_to_two_process_tf"), ".2f")})'
        for s in STACKS
    ]
    out.append(
        '| FedAvg round: s (ratio to plain TF 1 proc / 2 procs) | 100 clients | '
        f'{_fmt(one, ".3f")} / {_fmt(two, ".3f")} | ' + ' | '.join(cells) + ' |'
    )
    cells = [
        f'{_fmt(extra(f"test_peak_memory[{s}]", "peak_total_rss_mb"), ",.0f")} '
        f'({_fmt(median(f"test_peak_memory[{s}]"), ".0f")} s)'
        for s in STACKS
    ]
    data_mb = next(
        (
            extra(f'test_peak_memory[{s}]', 'client_data_mb')
            for s in STACKS
            if f'test_peak_memory[{s}]' in b
        ),
        None,
    )
    out.append(
        '| peak RSS, driver + workers: MB (round time) | 10,000 clients | '
        f'{_fmt(data_mb, ",.0f")} MB of data | ' + ' | '.join(cells) + ' |'
    )
    out += [
        '',
        '| worker pool start-up | 1 worker | 2 workers | 8 workers | first pool, with forkserver |',
        '|---|---|---|---|---|',
    ]
    first = next(
        (
            extra(f'test_pool_startup[{n}]', 'first_pool_start_seconds_with_forkserver')
            for n in (1, 2, 8)
            if f'test_pool_startup[{n}]' in b
        ),
        None,
    )
    out.append(
        '| s | '
        + ' | '.join(_fmt(median(f'test_pool_startup[{n}]'), '.2f') for n in (1, 2, 8))
        + f' | {_fmt(first, ".2f")} |'
    )
    out += [
        '',
        '| FedAvg clients/s: ours / hand-written N-process TF (speed ratio), driver CPU ms per '
        'round | 1 worker | 2 | 4 | 8 | 16 |',
        '|---|---|---|---|---|---|',
    ]
    for n in (100, 1000):
        cells = []
        for w in (1, 2, 4, 8, 16):
            name = f'test_scaling_fedavg[{w}w-{n}c]'
            cells.append(
                f'{_fmt(extra(name, "clients_per_second"), ".0f")} / '
                f'{_fmt(extra(name, "handwritten_clients_per_second"), ".0f")} '
                f'({_fmt(extra(name, "speed_vs_handwritten"), ".2f")}x), '
                f'{_fmt(extra(name, "driver_cpu_ms_per_round"), ".0f")} ms'
            )
        out.append(f'| {n:,} clients per round | ' + ' | '.join(cells) + ' |')
    cells = [
        _fmt(extra(f'test_driver_cpu_trivial[{w}]', 'driver_cpu_ms_per_round_per_worker'), '.2f')
        for w in (1, 2, 4, 8, 16)
    ]
    out.append(
        '| driver CPU ms per round per worker, trivial map+sum of 1,000 clients | '
        + ' | '.join(cells)
        + ' |'
    )
    soak = 'test_soak_fedavg_rss'
    if soak in b:
        out += [
            '',
            f'Soak, 300 FedAvg rounds on 2 workers: driver RSS '
            f'{_fmt(extra(soak, "driver_rss_growth_pct"), "+.2f")} %, worker RSS (largest) '
            f'{_fmt(extra(soak, "worker_rss_growth_pct"), "+.2f")} %, '
            f'{_fmt(extra(soak, "seconds_per_round"), ".3f")} s per round.',
        ]
    return '\n'.join(out)


def history_table(storage: str) -> str:
    """The history overview of the runs saved under `storage`."""
    from simharness.bench.history import build_history, render_overview
    from simharness.bench.results import find_runs

    return render_overview(build_history(find_runs(storage)))


def main(argv: list) -> int:
    if len(argv) in (2, 3) and argv[1] == '--history':
        print(history_table(argv[2] if len(argv) == 3 else HISTORY))
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(tables(_load(argv[1])))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
