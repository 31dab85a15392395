"""The command line: ``simharness run | sweep | report``.

::

    simharness run CONFIG [--set key=value ...] [--results DIR] [--no-progress]
        one run -> DIR/<name>/<run-id>/ (+ its report); run id 'default', or built from --set
    simharness sweep CONFIG [--set key=value ...] [--results DIR] [--no-progress]
        every point of [sweep.grid]; finished runs are skipped -> DIR/<name>/ (+ report)
    simharness report RESULTS_DIR
        report.md and PNG plots for every run under RESULTS_DIR

Exit codes: 0 done, 2 invalid config / arguments (``error: <message>``, no
traceback), 130 interrupted (Ctrl-C; the run's summary says
'interrupted').
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from simharness.errors import ConfigError, SimharnessValueError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_SET_HELP = ('override a config value: a dotted key and a TOML literal, e.g. '
             '--set stack.num_workers=2 --set training.rounds=5 --set stack.kind=process '
             '(a bare word is a string); may be repeated')


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='simharness',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description='Run reproducible federated learning experiments from TOML configs.',
        epilog='examples:\n'
               '  simharness run configs/quickstart.toml\n'
               '  simharness run configs/quickstart.toml --set stack.kind=thread\n'
               '  simharness sweep experiments/scaling.toml\n'
               '  simharness report results/scaling\n\n'
               'Results go to RESULTS/<experiment name>/<run id>/: config.toml (resolved),\n'
               'environment.json, metrics.jsonl (one line per round), summary.json; reports\n'
               'add report.md and PNG plots. Exit codes: 0 ok, 2 invalid config or\n'
               'arguments, 130 interrupted (Ctrl-C).')
    sub = p.add_subparsers(dest='command', metavar='{run,sweep,report}')
    sub.required = True

    run = sub.add_parser(
        'run', help='run one experiment',
        description='Run one experiment (a config without [sweep]) and write its results and '
                    'report. The run id is "default", or built from the --set overrides '
                    '(e.g. num_workers=2,rounds=5). An existing run with that id is run again '
                    'from scratch.')
    sweep = sub.add_parser(
        'sweep', help='run every point of a config\'s [sweep.grid] (resumable)',
        description='Run every point of the [sweep.grid] of a config, one after another, each '
                    'in RESULTS/<name>/<run id>/ with run ids like '
                    'num_workers=2,clients_per_round=100,seed=0. Runs already complete with the '
                    'same resolved config are skipped, so an interrupted sweep resumes where it '
                    'stopped; unfinished runs start again from scratch. Writes '
                    'RESULTS/<name>/report.md at the end.')
    for sp in (run, sweep):
        sp.add_argument('config', metavar='CONFIG', help='the experiment TOML file')
        sp.add_argument('--set', dest='overrides', action='append', default=[],
                        metavar='KEY=VALUE', help=_SET_HELP)
        sp.add_argument('--results', default='results', metavar='DIR',
                        help='results root directory (default: ./results)')
        sp.add_argument('--no-progress', action='store_true',
                        help='no progress bar (it is also off when stderr is not a terminal or '
                             'the CI environment variable is set)')

    report = sub.add_parser(
        'report', help='write report.md and plots for finished runs',
        description='Read every run (directory with a summary.json) under RESULTS_DIR -- one '
                    'run, one experiment, or a root of several -- and write RESULTS_DIR/report.md '
                    '(a table of the runs) and PNG plots: accuracy and loss vs round, and round '
                    'time and clients/s vs workers when the runs differ in workers or '
                    'clients per round.')
    report.add_argument('results_dir', metavar='RESULTS_DIR', help='directory to report on')
    return p


def _err(message: str) -> int:
    print(f'error: {message}', file=sys.stderr)
    return EXIT_USAGE


def _fmt(value: Optional[float], spec: str) -> str:
    return '-' if value is None else format(value, spec)


def _print_outputs(paths: Sequence[Path]) -> None:
    if not paths:
        return
    print(f'report:  {paths[0]}')
    if len(paths) > 1:
        print('plots:   ' + ', '.join(str(p) for p in paths[1:]))


def _cmd_run(args: argparse.Namespace, sweep: bool) -> int:
    # pylint: disable=import-outside-toplevel
    from simharness.experiments import config as C
    from simharness.experiments.report import write_report
    from simharness.experiments.runner import run_experiment, run_sweep

    config = C.load_config(args.config)
    pairs = [C.parse_override(o) for o in args.overrides]
    config = C.apply_overrides(config, args.overrides)
    results = Path(args.results)
    progress = not args.no_progress
    if not sweep:
        if config.sweep.grid:
            return _err(f'{args.config} has a [sweep] grid ({len(C.expand_sweep(config))} runs); '
                        'run it with: simharness sweep ' + args.config)
        run_id = C.run_id_for([(k, v) for k, v in pairs if not k.startswith('sweep.')])
        result = run_experiment(config, results, progress=progress, run_id=run_id)
        s = result.summary
        print(f'{config.name}/{run_id}: {s["rounds_completed"]} rounds, final loss '
              f'{_fmt(s["final_loss"], ".6f")}, final accuracy {_fmt(s["final_accuracy"], ".4f")}'
              f', median round {_fmt(s["median_round_seconds"], ".4f")} s, '
              f'{_fmt(s["clients_per_second"], ".1f")} clients/s, total '
              f'{_fmt(s["total_seconds"], ".1f")} s')
        print(f'results: {result.run_dir}')
        _print_outputs(write_report(result.run_dir))
        return EXIT_OK
    runs = run_sweep(config, results, progress=progress, log=print)
    for r in runs:
        s = r.summary
        print(f'  {r.run_id}: {s.get("status")}{" (skipped)" if r.skipped else ""}, final loss '
              f'{_fmt(s.get("final_loss"), ".6f")}, median round '
              f'{_fmt(s.get("median_round_seconds"), ".4f")} s')
    out = results / config.name
    print(f'results: {out}')
    _print_outputs(write_report(out))
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    # pylint: disable-next=import-outside-toplevel
    from simharness.experiments.report import write_report
    try:
        paths = write_report(args.results_dir)
    except SimharnessValueError as e:
        return _err(str(e))
    _print_outputs(paths)
    return EXIT_OK


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line.

    Args:
        argv: the arguments without the program name (default: sys.argv[1:]).

    Returns:
        The exit code: 0 ok, 2 invalid config or arguments, 130 interrupted.
        (`--help` and argparse usage errors exit through `SystemExit` with
        0 and 2.)
    """
    args = _parser().parse_args(argv)
    # TensorFlow's C++ start-up chatter (CUDA probing on CPU-only machines)
    # is noise on a command line; the user's own setting wins.
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    try:
        if args.command == 'report':
            return _cmd_report(args)
        return _cmd_run(args, sweep=args.command == 'sweep')
    except ConfigError as e:
        return _err(str(e))
    except KeyboardInterrupt:
        print('interrupted', file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
