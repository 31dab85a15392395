"""The command line: ``simharness run | sweep | report``.

::

    simharness run CONFIG [--set key=value ...] [--results DIR] [--no-progress]
        one run -> DIR/<name>/<run-id>/ (+ its report); run id 'default', or built from --set
    simharness sweep CONFIG [--set key=value ...] [--results DIR] [--no-progress]
                     [--jobs N | --ray ADDRESS]
        every point of [sweep.grid]; finished runs are skipped -> DIR/<name>/ (+ report);
        points side by side on disjoint cores (default: as many as fit), or Ray tasks
    simharness report RESULTS_DIR
        report.md and PNG plots for every run under RESULTS_DIR

Exit codes: 0 done, 1 results could not be written (a full disk, a
read-only or unwritable directory: one ``error: <path>: <reason>`` line, the
summary says 'failed' when it can still be written), 2 invalid config /
arguments (``error: <message>``, no traceback; also a run directory that
another run is using: ``error: <run dir>: another run of it is in progress
(pid N, ...)``, refused before TensorFlow loads), 130 interrupted (Ctrl-C),
143 terminated (SIGTERM; SIGHUP gives 129). Interrupted and terminated runs
stop the same way: the worker pool is closed, the run's summary says
'interrupted'. ``--verbose`` (or ``SIMHARNESS_TRACEBACK=1``) adds the
traceback and INFO logs.

::

    main(argv)
      log handler on the 'simharness' logger    (removed on return)
      SIGTERM, SIGHUP -> raise Terminated        (a KeyboardInterrupt; old handlers restored on return)
      run / sweep: reap_orphaned_segments()      (segments of dead simharness processes)
                   -> run_experiment / run_sweep -> report

The library installs no signal handler: only `main` does, while it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, TextIO, Type, TYPE_CHECKING, Union

from simharness.errors import ConfigError, RunInProgressError, SimharnessValueError
from simharness.tfquiet import quiet_runtime_logs

if TYPE_CHECKING:
    from simharness.experiments.config import ExperimentConfig

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""Ctrl-C. A signal the CLI stops on exits with 128 + its number (SIGTERM 143, SIGHUP 129)."""

#: Signals that stop a run as Ctrl-C does (handled only while `main` runs).
STOP_SIGNALS = tuple(getattr(signal, n) for n in ('SIGTERM', 'SIGHUP') if hasattr(signal, n))

#: Set to a non-empty value other than 0 to get tracebacks (as with --verbose).
TRACEBACK_ENV = 'SIMHARNESS_TRACEBACK'

_log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the CLI receives SIGTERM or SIGHUP.

    A `KeyboardInterrupt`, so everything that stops cleanly on Ctrl-C (the
    runner's 'interrupted' summary, closing the stack) does so on it too.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals(signums: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Turns `signums` into `Terminated` in the main thread, for the block.

    Only the first signal raises: later ones are ignored, so that the
    clean-up it started (closing workers, writing the summary) is not cut
    short; SIGKILL is there for a stop that must not wait. The previous
    handlers are restored at the end. Outside the main thread (where
    Python cannot install handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: List[int] = []

    def handler(signum: int, frame: Any) -> None:  # pylint: disable=unused-argument
        if received:
            return
        received.append(signum)
        raise Terminated(signum)

    previous = {}
    try:
        for signum in signums:
            previous[signum] = signal.signal(signum, handler)
        yield
    except Exception as e:
        if received:  # the signal landed in clean-up code that failed in turn (e.g. TF's
            # device scope exit): still a stop by that signal
            raise Terminated(received[0]) from e
        raise
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_DFL if old is None else old)


@contextlib.contextmanager
def _cli_logging(verbose: bool, level: Optional[str] = None) -> Iterator[None]:
    """Shows simharness log records on stderr for the block (INFO with --verbose, or
    `level`: 'debug', 'info', 'warning', 'error')."""
    logger = logging.getLogger('simharness')
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(levelname)s %(name)s: %(message)s'))
    threshold = (
        getattr(logging, level.upper()) if level else (logging.INFO if verbose else logging.WARNING)
    )
    handler.setLevel(threshold)
    # Round lines and the resume notice are printed by the runner itself: shown once.
    handler.addFilter(lambda record: not getattr(record, 'simharness_console', False))
    old_level = logger.level
    logger.addHandler(handler)
    if old_level == logging.NOTSET or old_level > threshold:
        logger.setLevel(threshold)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _traceback_wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, 'verbose', False)) or os.environ.get(TRACEBACK_ENV, '') not in (
        '',
        '0',
    )


def _os_error(e: OSError, verbose: bool) -> int:
    """One line for an OSError (a full disk, an unwritable results directory)."""
    if verbose:
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    reason = e.strerror or str(e)
    if e.errno is not None and e.errno in errno.errorcode:
        reason += f' ({errno.errorcode[e.errno]})'
    where = f'{e.filename}: ' if e.filename else ''
    notes = ''.join(f'; {n}' for n in getattr(e, '__notes__', ()))
    print(f'error: {where}{reason}{notes}', file=sys.stderr)
    return EXIT_FAILED


def _reap_segments() -> None:
    """Removes the shared-memory segments earlier runs left when they were killed."""
    # pylint: disable-next=import-outside-toplevel
    from simharness.runtime.local.shm import reap_orphaned_segments

    reaped = reap_orphaned_segments()
    _log.info(
        'reclaimed %d orphaned shared-memory segment(s) of dead simharness processes%s',
        len(reaped),
        f': {", ".join(reaped)}' if reaped else '',
    )


_SET_HELP = (
    'override a config value: a dotted key and a TOML literal, e.g. '
    '--set stack.num_workers=2 --set training.rounds=5 --set stack.kind=process '
    '(a bare word is a string); may be repeated'
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='simharness',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description='Run reproducible federated learning experiments from TOML configs.',
        epilog='examples:\n'
        '  simharness run configs/quickstart.toml\n'
        '  simharness run configs/quickstart.toml --set stack.kind=thread\n'
        '  simharness run configs/quickstart.toml --set stack.kind=ray \\\n'
        '      --set stack.address=auto          # on the Ray cluster of this machine\n'
        '  simharness sweep experiments/scaling.toml\n'
        '  simharness report results/scaling\n\n'
        'Results go to RESULTS/<experiment name>/<run id>/: config.toml (resolved),\n'
        'environment.json, metrics.jsonl (one line per round), summary.json; reports\n'
        'add report.md and PNG plots.\n\n'
        'Exit codes: 0 ok; 1 results could not be written (disk full, read-only or\n'
        'unwritable directory: one "error: <path>: <reason>" line, summary status\n'
        '"failed"); 2 invalid config or arguments; 130 interrupted (Ctrl-C); 143\n'
        'terminated (SIGTERM; 129 for SIGHUP). SIGTERM and SIGHUP stop a run as Ctrl-C\n'
        'does: workers stopped, summary status "interrupted". Each run or sweep first\n'
        'removes shared-memory segments (/dev/shm/simharness_<pid>_*) left by killed\n'
        f'simharness processes. Tracebacks: --verbose, or {TRACEBACK_ENV}=1.',
    )
    p.add_argument('--version', action='version', version=f'%(prog)s {_version()}')
    sub = p.add_subparsers(dest='command')
    sub.required = True

    run = sub.add_parser(
        'run',
        help='run one experiment',
        description='Run one experiment (a config without [sweep]) and write its results and '
        'report. The run id is "default", or built from the --set overrides '
        '(e.g. num_workers=2,rounds=5). An interrupted or failed run of the same '
        'config resumes from its last checkpoint ([training] checkpoint_every; '
        '--restart: from round 0). A complete run of the same config is not run again (its '
        'results are kept; exit 0); over a complete run of another config it stops '
        'with an error: --restart runs it again from scratch, replacing its results. '
        'While a run of it is in progress (its run directory is locked), a second '
        'one is refused (exit 2). '
        'Ctrl-C, SIGTERM and SIGHUP stop it cleanly (summary status '
        '"interrupted"; exit 130, 143, 129); a results write that fails (disk full, '
        'unwritable directory) exits 1 with summary status "failed".',
    )
    sweep = sub.add_parser(
        'sweep',
        help="run every point of a config's [sweep.grid] (resumable)",
        description='Run every point of the [sweep.grid] of a config, each '
        'in RESULTS/<name>/<run id>/ with run ids like '
        'num_workers=2,clients_per_round=100,seed=0. Runs already complete with the '
        'same resolved config are skipped, so an interrupted sweep resumes where it '
        'stopped; interrupted or failed runs resume from their last checkpoint '
        '(--restart: from round 0). Writes '
        'RESULTS/<name>/report.md at the end. Points run side by side on disjoint cores '
        "(--jobs; default: usable cores // a point's workers), or as tasks on a Ray "
        'cluster (--ray). Stops and exit codes as for run.',
    )
    sweep.add_argument(
        '--jobs',
        default=None,
        metavar='N',
        help='points run at once, each in its own process on its own cores (the '
        "usable cores split into N sets of a point's stack.num_workers; more than "
        'fit: a warning); 1: one after another, in this process; default (or "auto"): '
        "as many as fit, usable cores // a point's workers",
    )
    sweep.add_argument(
        '--ray',
        default=None,
        metavar='ADDRESS',
        help='run the points as tasks on this Ray cluster ("auto", "host:port" or '
        '"ray://host:port", as stack.address): each point on one node, its results '
        'written here under --results; resumable as a local sweep',
    )
    for sp in (run, sweep):
        sp.add_argument('config', metavar='CONFIG', help='the experiment TOML file')
        sp.add_argument(
            '--set',
            dest='overrides',
            action='append',
            default=[],
            metavar='KEY=VALUE',
            help=_SET_HELP,
        )
        sp.add_argument(
            '--results',
            default='results',
            metavar='DIR',
            help='results root directory (default: ./results)',
        )
        sp.add_argument(
            '--restart',
            action='store_true',
            help='run again from round 0, replacing earlier results (default: an '
            'interrupted or failed run of the same config resumes from its '
            'last checkpoint; a complete run is kept)',
        )
        sp.add_argument(
            '--no-progress',
            action='store_true',
            help='no progress bar (it is also off when stderr is not a terminal or '
            'the CI environment variable is set)',
        )
        sp.add_argument(
            '--log-level',
            choices=('debug', 'info', 'warning', 'error'),
            help='simharness log records shown on stderr (default: warning; info '
            'with --verbose); "error" also drops the per-round lines and the '
            'progress bar; every run also logs at INFO to <run dir>/run.log',
        )
        sp.add_argument(
            '-v',
            '--verbose',
            action='store_true',
            help='INFO logs (e.g. shared-memory segments of killed runs reclaimed) '
            'and full tracebacks for errors (also: '
            f'{TRACEBACK_ENV}=1)',
        )

    report = sub.add_parser(
        'report',
        help='write report.md and plots for finished runs',
        description='Read every run (directory with a summary.json) under RESULTS_DIR -- one '
        'run, one experiment, or a root of several -- and write RESULTS_DIR/report.md '
        '(a table of the runs) and PNG plots: accuracy and loss vs round, and round '
        'time and clients/s vs workers when the runs differ in workers or '
        'clients per round.',
    )
    report.add_argument('results_dir', metavar='RESULTS_DIR', help='directory to report on')
    from simharness import serve as _serve  # pylint: disable=import-outside-toplevel

    _serve.add_parser(sub)
    report.add_argument(
        '-v',
        '--verbose',
        action='store_true',
        help=f'full tracebacks for errors (also: {TRACEBACK_ENV}=1)',
    )
    from simharness.bench import cli as bench_cli  # pylint: disable=import-outside-toplevel

    bench_cli.add_parser(sub)  # simharness bench run|ab|compare|history
    # Every subcommand added above, in the usage line and in a missing command's error.
    sub.metavar = '{' + ','.join(sub.choices) + '}'
    return p


def _version() -> str:
    from importlib import metadata  # pylint: disable=import-outside-toplevel

    try:
        return metadata.version('simharness')
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return 'unknown (not installed)'


def _err(message: str) -> int:
    print(f'error: {message}', file=sys.stderr)
    return EXIT_USAGE


def _fmt(value: Optional[float], spec: str) -> str:
    return '-' if value is None else format(value, spec)


def _print_outputs(paths: Sequence[Path]) -> None:
    if not paths:
        return
    print(f'report:  {paths[0]}')
    plots = [p for p in paths[1:] if p.suffix == '.png']
    tables = [p for p in paths[1:] if p.suffix != '.png']
    if plots:
        print('plots:   ' + ', '.join(str(p) for p in plots))
    if tables:
        print('tables:  ' + ', '.join(str(p) for p in tables))


def _cmd_run(args: argparse.Namespace, sweep: bool) -> int:
    # pylint: disable=import-outside-toplevel
    from simharness.experiments import config as C
    from simharness.experiments.report import write_report
    from simharness.experiments.runner import run_experiment, run_sweep

    from simharness.experiments.runner.lock import check_not_running
    from simharness.experiments.runner.rundir import is_finished, read_json, SUMMARY_FILE

    from simharness.tfquiet import initialize_devices

    # The config first: a config error is reported before TensorFlow loads (fast).
    config = C.load_config(args.config)
    pairs = [C.parse_override(o) for o in args.overrides]
    config = C.apply_overrides(config, args.overrides)
    _find_builder_module(config, Path(args.config))
    results = Path(args.results)
    # --log-level error: errors only (no round lines, no bar).
    progress = not args.no_progress and args.log_level != 'error'
    if not sweep:
        if config.sweep.grid:
            return _err(
                f'{args.config} has a [sweep] grid ({len(C.expand_sweep(config))} runs); '
                'run it with: simharness sweep ' + args.config
            )
        run_id = C.run_id_for([(k, v) for k, v in pairs if not k.startswith('sweep.')])
        run_dir = results / config.name / run_id
        check_not_running(run_dir)  # refused now, not after TensorFlow loads
        if not args.restart and is_finished(run_dir):
            done = read_json(run_dir / SUMMARY_FILE) or {}
            if not is_finished(run_dir, config):
                return _err(
                    f'{run_dir} holds a complete run of another config (finished '
                    f'{done.get("finished_at", "?")}); --restart runs this config there '
                    'from scratch, replacing it; --results DIR keeps both'
                )
            print(
                f'{config.name}/{run_id}: complete already (finished '
                f'{done.get("finished_at", "?")}, {done.get("rounds_completed")} rounds, final '
                f'accuracy {_fmt(done.get("final_accuracy"), ".4f")}); not run again '
                '(--restart: run it again from scratch)'
            )
            print(f'results: {run_dir}')
            return EXIT_OK
    else:
        for point_id, point in C.expand_sweep(config):  # a sweep at it already: refused now
            check_not_running(results / point.name / point_id)
    jobs = _sweep_jobs(args, config) if sweep else 1
    if sweep and args.ray is not None:  # an address that does not answer: said before TF loads
        from simharness.experiments.runner import ray_sweep

        ray_sweep.check_address(args.ray)
    if not sweep or _points_run_here(args, config, jobs, results):
        initialize_devices()  # TensorFlow's C++ start-up lines filtered out (real errors still show)
    _reap_segments()
    if not sweep:
        result = run_experiment(
            config, results, progress=progress, run_id=run_id, resume=not args.restart
        )
        s = result.summary
        print(
            f'{config.name}/{run_id}: {s["rounds_completed"]} rounds, final loss '
            f'{_fmt(s["final_loss"], ".6f")}, final accuracy {_fmt(s["final_accuracy"], ".4f")}'
            f', median round {_fmt(s["median_round_seconds"], ".4f")} s, '
            f'{_fmt(s["clients_per_second"], ".1f")} clients/s, total '
            f'{_fmt(s["total_seconds"], ".1f")} s'
        )
        print(f'results: {result.run_dir}')
        _print_outputs(write_report(result.run_dir))
        return EXIT_OK
    with _oversubscription_logged():
        runs = run_sweep(
            config,
            results,
            progress=progress and jobs == 1 and args.ray is None,
            log=print,
            resume=not args.restart,
            jobs=jobs,
            ray_address=args.ray,
        )
    for r in runs:
        s = r.summary
        if r.status == 'failed':
            print(f'  {r.run_id}: FAILED: {r.error or s.get("error")}')
            continue
        print(
            f'  {r.run_id}: {s.get("status")}{" (skipped)" if r.skipped else ""}, final loss '
            f'{_fmt(s.get("final_loss"), ".6f")}, median round '
            f'{_fmt(s.get("median_round_seconds"), ".4f")} s'
        )
    out = results / config.name
    print(f'results: {out}')
    _print_outputs(write_report(out))
    failed = [r.run_id for r in runs if r.status == 'failed']
    if failed:
        print(
            f'error: {len(failed)} of {len(runs)} sweep points failed: {", ".join(failed)} '
            '(their summary.json has the error; a rerun resumes or retries them)',
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _points_run_here(
    args: argparse.Namespace, config: 'ExperimentConfig', jobs: int, results: Path
) -> bool:
    """Whether the sweep runs points in this process (one job, or one point left), which
    then starts TensorFlow; side by side or on Ray, only its jobs and tasks do."""
    # pylint: disable-next=import-outside-toplevel
    from simharness.experiments import config as C
    from simharness.experiments.runner.rundir import is_finished  # pylint: disable=import-outside-toplevel

    if args.ray is not None:
        return False
    left = [p for i, p in C.expand_sweep(config) if not is_finished(results / p.name / i, p)]
    return jobs == 1 or len(left) <= 1


def _sweep_jobs(args: argparse.Namespace, config: 'ExperimentConfig') -> int:
    """``--jobs``: an int >= 1, or (unset, "auto") as many as fit this machine.

    Raises:
        ConfigError: another value, or --jobs with --ray.
    """
    # pylint: disable-next=import-outside-toplevel
    from simharness.experiments import config as C
    from simharness.experiments.runner import parallel  # pylint: disable=import-outside-toplevel

    if args.ray is not None and args.jobs is not None:
        raise ConfigError(
            '--jobs and --ray do not go together: on Ray the free CPUs of the cluster '
            'decide how many points run at once',
            key='--jobs',
            value=args.jobs,
        )
    if args.jobs is None or args.jobs == 'auto':
        return parallel.default_jobs(config, [c for _, c in C.expand_sweep(config)])
    try:
        jobs = int(args.jobs)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise ConfigError(
            f'--jobs must be an int >= 1 or "auto", got {args.jobs!r}',
            key='--jobs',
            value=args.jobs,
        )
    return jobs


@contextlib.contextmanager
def _oversubscription_logged() -> Iterator[None]:
    """`OversubscribedWarning` s of the block as log warnings (one line, as a run's own
    `stack.num_workers` warning); other warnings as Python shows them."""
    from simharness.errors import OversubscribedWarning  # pylint: disable=import-outside-toplevel

    with warnings.catch_warnings():
        warnings.simplefilter('default', OversubscribedWarning)
        show = warnings.showwarning

        def shown(
            message: Union[Warning, str],
            category: Type[Warning],
            filename: str,
            lineno: int,
            file: Optional[TextIO] = None,
            line: Optional[str] = None,
        ) -> None:
            if issubclass(category, OversubscribedWarning):
                _log.warning('%s', message)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = shown
        yield


def _find_builder_module(config: Any, config_path: Path) -> None:
    """``[model] keras = "module:function"``: the module is looked up in the config's folder
    and the working directory too (appended to sys.path and PYTHONPATH, so the workers find it);
    a module found nowhere is a ConfigError with a hint. Nothing is imported here."""
    # pylint: disable=import-outside-toplevel
    import importlib.util

    ref = getattr(config.model, 'keras', None)
    if not isinstance(ref, str) or ':' not in ref:
        return  # none, or malformed: the runner's error says what it should look like
    top = ref.split(':')[0].split('.')[0]
    folders = [str(config_path.resolve().parent), os.getcwd()]
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
    path = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    os.environ['PYTHONPATH'] = os.pathsep.join(path + [f for f in folders if f not in path])
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f'{config_path}: model.keras = {ref!r}: no module {top!r} in the '
            f"config's folder ({folders[0]}), the working directory "
            f'({folders[1]}) or the installed packages; put {top}.py next to the '
            'config or add its folder to PYTHONPATH',
            key='model.keras',
            value=ref,
        )


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

    While it runs, SIGTERM and SIGHUP stop a run as Ctrl-C does (the
    previous handlers are restored on return) and simharness log records go
    to stderr.

    Args:
        argv: the arguments without the program name (default: sys.argv[1:]).

    Returns:
        The exit code: 0 ok, 1 results could not be written, 2 invalid
        config or arguments (or the run directory is in use by another
        run), 130 interrupted (Ctrl-C), 128 + the signal's
        number when stopped by SIGTERM (143) or SIGHUP (129). (`--help` and
        argparse usage errors exit through `SystemExit` with 0 and 2.)
    """
    args = _parser().parse_args(argv)
    verbose = _traceback_wanted(args)
    # TensorFlow's C++ start-up chatter (CUDA probing on CPU-only machines)
    # is noise on a command line; the user's own setting wins, and
    # SIMHARNESS_LOG_LEVEL=INFO shows it all (simharness.tfquiet).
    quiet_runtime_logs()
    with _cli_logging(verbose, getattr(args, 'log_level', None)):
        try:
            with _stop_on_signals():
                if args.command == 'report':
                    return _cmd_report(args)
                if args.command == 'bench':
                    from simharness.bench import cli as bench_cli  # pylint: disable=import-outside-toplevel

                    return bench_cli.run(args)
                if args.command == 'serve':
                    from simharness import serve  # pylint: disable=import-outside-toplevel

                    return serve.main(args)
                return _cmd_run(args, sweep=args.command == 'sweep')
        except (ConfigError, RunInProgressError) as e:
            return _err(str(e))
        except Terminated as e:
            print(f'interrupted ({signal.Signals(e.signum).name})', file=sys.stderr)
            return 128 + e.signum
        except KeyboardInterrupt:
            print('interrupted', file=sys.stderr)
            return EXIT_INTERRUPTED
        except OSError as e:
            return _os_error(e, verbose)


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
