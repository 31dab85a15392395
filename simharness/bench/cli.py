"""``simharness bench``: run, compare and keep the history of pytest-benchmark runs.

::

    simharness bench run [--storage DIR] [--rev REV ...] [--repeat N] [-- PYTEST_ARGS]
        benchmark sessions saved into DIR (pytest-benchmark storage), each
        revision from its own checkout (git archive), N times, interleaved
    simharness bench ab [--baseline REV] [--candidate REV] [--env-a K=V] [--env-b K=V]
                        [--repeat N] [--save DIR] [--fail] [-- PYTEST_ARGS]
        A (baseline, default HEAD) and B (candidate, default the work tree)
        run at once, their rounds taking turns; prints B/A per benchmark
    simharness bench compare A B [--storage DIR] [--fail]
        A, B: JSON files, saved run numbers or commit shas (comma-separated
        lists are pooled); prints B/A per benchmark, interval and verdict
    simharness bench history [STORAGE] [--out DIR] [--confirm [--fail]]
        history.md (tables per commit, steps found by a change-point fit
        marked with their first commit) and PNG plots; --confirm reruns each
        slower step (the commit before it and its first commit, interleaved)

Exit codes: 0 ok, 1 a regression with ``--fail`` (a 'slower' verdict, or
more memory; for ``history --confirm``: a slower step its rerun confirmed),
2 bad arguments or input (``error: ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from typing import Any, Dict, List, Sequence

from simharness.errors import SimharnessValueError

DEFAULT_PYTEST_ARGS = ['tests/benchmarks']
PROJECT_STORAGE = os.path.join('tests', 'benchmarks', 'history', 'runs')


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip('%')) / (100.0 if text.endswith('%') else 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a number such as 0.1 or 10%, got {text!r}')
    return value


def _key_value(text: str) -> str:
    if '=' not in text or not text.split('=', 1)[0]:
        raise argparse.ArgumentTypeError(f'expected KEY=VALUE, got {text!r}')
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f'expected an integer >= 1, got {text!r}')
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds ``bench`` and its subcommands to the subparsers `sub` of ``simharness``."""
    bench = sub.add_parser(
        'bench',
        help='benchmark runs: run per commit, interleaved A/B, compare, history',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Performance tracking on pytest-benchmark's saved JSON (docs/benchmarks.md, "
        '"Regression tracking"). Benchmarks timed with the simharness_benchmark '
        'fixture also save every round, the calibration workload, peak RSS and a '
        'result fingerprint.',
        epilog='examples:\n'
        '  simharness bench ab -- tests/benchmarks/test_fedavg.py -k process-2\n'
        '  simharness bench run --rev HEAD --repeat 2 -- tests/benchmarks/test_overhead.py\n'
        '  simharness bench compare 0003 0004 --storage tests/benchmarks/history/runs\n'
        '  simharness bench history tests/benchmarks/history/runs '
        '--out tests/benchmarks/history',
    )
    bsub = bench.add_subparsers(dest='bench_command', metavar='{run,ab,compare,history}')
    bsub.required = True

    def stats_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            '--tolerance',
            type=_fraction,
            default=0.10,
            metavar='T',
            help='changes within T are never reported (default 10%%)',
        )
        p.add_argument(
            '--confidence',
            type=_fraction,
            default=0.95,
            metavar='C',
            help='probability a verdict needs (default 95%%)',
        )
        p.add_argument(
            '--normalize',
            action='store_true',
            help='divide each run by its calibration workload first',
        )
        p.add_argument(
            '--fail', action='store_true', help='exit 1 on a regression (slower, or more memory)'
        )
        p.add_argument('-v', '--verbose', action='store_true', help='tracebacks for errors')

    run = bsub.add_parser(
        'run',
        help='run benchmark sessions and save them (per commit)',
        description='Run pytest benchmark sessions (--benchmark-only) and save them into '
        'STORAGE (pytest-benchmark storage). With --rev, each revision runs from '
        'its own checkout (git archive into a temporary folder; the work tree is '
        'not touched), with its own code and benchmarks, and is saved as a clean '
        'run of that commit. --repeat N runs each N times, revisions interleaved, '
        'so that the history knows the between-run scatter.',
    )
    run.add_argument(
        '--storage',
        default=PROJECT_STORAGE,
        metavar='DIR',
        help=f'where runs are saved (default {PROJECT_STORAGE})',
    )
    run.add_argument(
        '--rev',
        action='append',
        default=[],
        metavar='REV',
        help='a git revision to run (repeatable; default: the work tree as it is)',
    )
    run.add_argument(
        '--repeat', type=_positive, default=1, metavar='N', help='sessions per revision (default 1)'
    )
    run.add_argument(
        '--interleave',
        action='store_true',
        help='run the revisions of each repetition at once, taking turns round by '
        'round (as bench ab): their rounds meet the same load, and the history '
        'compares neighbouring commits round by round',
    )
    run.add_argument(
        '--rounds',
        type=_positive,
        default=30,
        metavar='N',
        help='with --interleave: timed rounds of every benchmark in every session (default 30)',
    )
    run.add_argument(
        '--timeout',
        type=float,
        default=None,
        metavar='S',
        help='seconds per session, or per rotation with --interleave (default: none)',
    )
    run.add_argument(
        'pytest_args',
        nargs='*',
        metavar='PYTEST_ARGS',
        help=f'after --: test paths and options (default {DEFAULT_PYTEST_ARGS[0]})',
    )
    run.add_argument('-v', '--verbose', action='store_true', help='tracebacks for errors')

    ab = bsub.add_parser(
        'ab',
        help='interleaved A/B: baseline and candidate take turns round by round',
        description='Run the baseline (A) and the candidate (B) as two pytest sessions at '
        'once; their timed rounds take turns, so both meet the same machine load, '
        'and each round of B is compared with the round of A next to it. Prints '
        'B/A per benchmark with its interval and verdict.',
    )
    ab.add_argument(
        '--baseline',
        default='HEAD',
        metavar='REV',
        help='revision of A (default HEAD); "." for the work tree',
    )
    ab.add_argument(
        '--candidate', default='.', metavar='REV', help='revision of B (default ".": the work tree)'
    )
    ab.add_argument(
        '--env-a',
        action='append',
        default=[],
        type=_key_value,
        metavar='K=V',
        help='environment variable for A only (repeatable)',
    )
    ab.add_argument(
        '--env-b',
        action='append',
        default=[],
        type=_key_value,
        metavar='K=V',
        help='environment variable for B only (repeatable)',
    )
    ab.add_argument(
        '--repeat',
        type=_positive,
        default=1,
        metavar='N',
        help='sessions per side, all in one rotation A, B, A, B, ... (default 1)',
    )
    ab.add_argument(
        '--rounds',
        type=_positive,
        default=30,
        metavar='N',
        help='timed rounds of every simharness_benchmark.round in every session '
        '(--simharness-rounds; equal rounds keep the turns in step; default 30)',
    )
    ab.add_argument(
        '--save',
        default=None,
        metavar='DIR',
        help="keep the sessions' JSON files in DIR (default: a temporary folder)",
    )
    ab.add_argument(
        '--timeout',
        type=float,
        default=None,
        metavar='S',
        help='seconds for all sessions (default: none)',
    )
    ab.add_argument(
        'pytest_args',
        nargs='*',
        metavar='PYTEST_ARGS',
        help=f'after --: test paths and options (default {DEFAULT_PYTEST_ARGS[0]})',
    )
    stats_args(ab)

    cmp_ = bsub.add_parser(
        'compare',
        help='B/A per benchmark of saved runs, with interval and verdict',
        description='Compare saved runs: A (baseline) and B (candidate), each a JSON file, a '
        'saved run number (0003) or a commit sha prefix (all runs of the commit; '
        'sha+ for its runs with uncommitted changes) in --storage; a comma-'
        'separated list is pooled. Separate runs are compared run by run, with '
        'the scatter of repeated runs of one commit found in --storage; the two '
        'sides of a "bench ab" session round by round.',
    )
    cmp_.add_argument('a', metavar='A')
    cmp_.add_argument('b', metavar='B')
    cmp_.add_argument(
        '--storage',
        default=None,
        metavar='DIR',
        help='pytest-benchmark storage to look runs up in (and to take the between-run noise from)',
    )
    cmp_.add_argument(
        '-k',
        dest='names',
        action='append',
        default=None,
        metavar='REGEX',
        help='only benchmarks whose name matches (repeatable)',
    )
    stats_args(cmp_)

    hist = bsub.add_parser(
        'history',
        help='history.md and plots per benchmark across commits, steps marked',
        description='Read every run under STORAGE, group them per machine and commit, find '
        'steps (a piecewise-constant fit of the log run medians per commit, PELT '
        'with a cost weighted by the noise, each step tested by the runs on either '
        'side with the tolerance) and write OUT/history.md (an overview table, a '
        'table per benchmark: median, run medians, clients/s, peak RSS, first '
        'round, result fingerprint, steps) and OUT/plots/*.png. --confirm reruns '
        'each slower step before calling it a regression.',
    )
    hist.add_argument(
        'storage',
        nargs='?',
        default=PROJECT_STORAGE,
        metavar='STORAGE',
        help=f'default {PROJECT_STORAGE}',
    )
    hist.add_argument(
        '--out', default=None, metavar='DIR', help='output folder (default: the parent of STORAGE)'
    )
    hist.add_argument('--machine', default=None, help='machine fingerprint (default: most runs)')
    hist.add_argument(
        '-k',
        dest='names',
        action='append',
        default=None,
        metavar='REGEX',
        help='only benchmarks whose name matches (repeatable)',
    )
    hist.add_argument('--no-plots', action='store_true', help='only history.md')
    hist.add_argument(
        '--tolerance',
        type=_fraction,
        default=0.10,
        metavar='T',
        help='a step must exceed T (default 10%%)',
    )
    hist.add_argument(
        '--confidence',
        type=_fraction,
        default=0.95,
        metavar='C',
        help='probability a step needs, split among the commits where it could be (default 95%%)',
    )
    hist.add_argument(
        '--penalty',
        type=float,
        default=2.0,
        metavar='P',
        help="the change-point fit's penalty per step, times log(commits), in "
        'units of the noise (default 2: the Schwarz criterion)',
    )
    hist.add_argument(
        '--confirm',
        action='store_true',
        help='rerun, for each slower step, the commit before it and its first '
        "commit interleaved (as bench ab, from git checkouts, the step's "
        'benchmarks only; run from where the benchmarks ran): a regression '
        'only if the rerun is slower too',
    )
    hist.add_argument(
        '--repeat',
        type=_positive,
        default=1,
        metavar='N',
        help='with --confirm: sessions per side (default 1)',
    )
    hist.add_argument(
        '--rounds',
        type=_positive,
        default=30,
        metavar='N',
        help='with --confirm: timed rounds per session (default 30)',
    )
    hist.add_argument(
        '--timeout',
        type=float,
        default=None,
        metavar='S',
        help='with --confirm: seconds for each rerun (default: none)',
    )
    hist.add_argument(
        '--fail',
        action='store_true',
        help='with --confirm: exit 1 when a rerun confirms a regression',
    )
    hist.add_argument('-v', '--verbose', action='store_true', help='tracebacks for errors')
    return bench


def _env(pairs: Sequence[str]) -> Dict[str, str]:
    return dict(p.split('=', 1) for p in pairs)


def _repo_root() -> str:
    from simharness.bench.runner import git

    return git(['rev-parse', '--show-toplevel'], os.getcwd())


def _side(rev: str, tmp: str, pytest_args: Sequence[str], env: Dict[str, str]) -> Any:
    from simharness.bench.runner import Session, checkout

    if rev == '.':
        return Session(os.getcwd(), pytest_args, env)
    dest = os.path.join(tmp, rev.replace('/', '_').replace('~', '_').replace('^', '_'))
    info = checkout(rev, dest, _repo_root())
    rel = os.path.relpath(os.getcwd(), _repo_root())
    cwd = os.path.normpath(os.path.join(dest, rel))
    return Session(cwd, pytest_args, env, code_path=dest, commit=info)


def _save_into(
    storage: str, json_path: str, name: str, commit: Any = None, history: bool = False
) -> str:
    """Copies a session's JSON into pytest-benchmark storage as <platform>/NNNN_<name>.json.

    `commit` (the revision's commit_info) replaces what the session saved
    (a checkout outside git, or an old plugin, saves 'unversioned').
    """
    from simharness.bench.history import atomic_write

    with open(json_path, encoding='utf-8') as f:
        data = json.load(f)
    if commit:
        data['commit_info'] = dict(commit)
    inter = (data.get('simharness') or {}).get('interleave')
    if history and inter:  # a history rotation (bench run --interleave), not an A/B experiment
        inter['history'] = True
    mi = data.get('machine_info') or {}
    folder = '{}-{}-{}-{}bit'.format(
        mi.get('system', 'unknown'),
        mi.get('python_implementation', 'unknown'),
        '.'.join(str(mi.get('python_version', '')).split('.')[:2]),
        (mi.get('cpu') or {}).get('bits', 64),
    )
    target = os.path.join(storage, folder)
    os.makedirs(target, exist_ok=True)
    numbers = [
        int(m.group(1)) for f in os.listdir(target) if (m := re.match(r'^([0-9]{4})_.*\.json$', f))
    ]
    path = os.path.join(target, f'{max(numbers, default=0) + 1:04d}_{name}.json')
    atomic_write(path, json.dumps(data, indent=2).encode())
    return path


def _cmd_run(args: argparse.Namespace) -> int:
    from simharness.bench.runner import run_interleaved, run_session

    storage = os.path.abspath(args.storage)
    pytest_args = list(args.pytest_args or DEFAULT_PYTEST_ARGS)
    if args.interleave:
        pytest_args.append(f'--simharness-rounds={args.rounds}')
    with tempfile.TemporaryDirectory(prefix='simharness-bench-') as tmp:
        sides = [(rev, _side(rev, tmp, pytest_args, {})) for rev in (args.rev or ['.'])]
        names = [sess.commit['id'][:12] if sess.commit else 'worktree' for _, sess in sides]
        if args.interleave and len(set(names)) != len(names):
            raise SimharnessValueError(f'--interleave needs distinct revisions, got {names}')
        for rep in range(args.repeat):
            if args.interleave:
                print(
                    f'rotation {rep + 1}/{args.repeat}: {", ".join(names)} taking turns ...',
                    flush=True,
                )
                paths = run_interleaved(
                    [sess for _, sess in sides],
                    os.path.join(tmp, str(rep)),
                    timeout=args.timeout,
                    labels=names,
                )
                for path, name, (_, sess) in zip(paths, names, sides):
                    print(
                        f'  saved {_save_into(storage, path, name, sess.commit, True)}', flush=True
                    )
                continue
            for (rev, sess), name in zip(sides, names):
                out = os.path.join(tmp, f'{name}-{rep}.json')
                print(f'run {rep + 1}/{args.repeat} of {rev} ({name}) ...', flush=True)
                run_session(sess, out, timeout=args.timeout)
                print(f'  saved {_save_into(storage, out, name, sess.commit)}', flush=True)
    return 0


def _print_comparisons(comparisons: Sequence[Any], a_label: str, b_label: str, fail: bool) -> int:
    from simharness.bench.compare import any_regression, format_comparisons

    print(format_comparisons(comparisons, a_label, b_label))
    return 1 if fail and any_regression(comparisons) else 0


def _interleaved_ab(
    baseline: str,
    candidate: str,
    pytest_args: Sequence[str],
    repeat: int,
    rounds: int,
    timeout: Any,
    tolerance: float,
    confidence: float,
    normalize: bool = False,
    env_a: Sequence[str] = (),
    env_b: Sequence[str] = (),
    save: Any = None,
) -> List[Any]:
    """Runs A (`baseline`) and B (`candidate`) interleaved, `repeat` sessions a side (the
    machinery of ``bench ab``), and returns B/A per benchmark."""
    from simharness.bench.compare import compare_runs
    from simharness.bench.results import load_run
    from simharness.bench.runner import run_interleaved

    pytest_args = [*(pytest_args or DEFAULT_PYTEST_ARGS), f'--simharness-rounds={rounds}']
    with tempfile.TemporaryDirectory(prefix='simharness-ab-') as tmp:
        a = _side(baseline, tmp, pytest_args, _env(env_a))
        b = _side(candidate, tmp, pytest_args, _env(env_b))
        out_dir = os.path.abspath(save) if save else os.path.join(tmp, 'out')
        sessions, labels = [], []
        for i in range(repeat):
            sessions += [a, b]
            labels += [f'A{i + 1}', f'B{i + 1}']
        print(
            f'A = {baseline}, B = {candidate}: {len(sessions)} sessions taking turns ...',
            flush=True,
        )
        paths = run_interleaved(sessions, out_dir, timeout=timeout, labels=labels)
        runs = [load_run(p) for p in paths]
        if save:
            print(f'sessions saved: {", ".join(paths)}')
        return compare_runs(runs[0::2], runs[1::2], tolerance, confidence, normalize)


def _cmd_ab(args: argparse.Namespace) -> int:
    comparisons = _interleaved_ab(
        args.baseline,
        args.candidate,
        args.pytest_args,
        args.repeat,
        args.rounds,
        args.timeout,
        args.tolerance,
        args.confidence,
        args.normalize,
        args.env_a,
        args.env_b,
        args.save,
    )
    return _print_comparisons(
        comparisons, f'A ({args.baseline})', f'B ({args.candidate})', args.fail
    )


def _cmd_compare(args: argparse.Namespace) -> int:
    from simharness.bench.compare import compare_runs
    from simharness.bench.results import find_runs, resolve_runs

    sides = []
    for spec in (args.a, args.b):
        runs: List[Any] = []
        for part in spec.split(','):
            if part:
                runs += [r for r in resolve_runs(part, args.storage) if r not in runs]
        sides.append(runs)
    history = find_runs(args.storage) if args.storage else []
    names = None
    if args.names:
        from simharness.bench.results import common_names

        names = [n for n in common_names(*sides) if any(re.search(k, n) for k in args.names)]
        if not names:
            raise SimharnessValueError(f'no benchmark in both A and B matches {args.names}')
    comparisons = compare_runs(
        sides[0],
        sides[1],
        args.tolerance,
        args.confidence,
        args.normalize,
        names=names,
        history=history,
    )
    return _print_comparisons(comparisons, f'A ({args.a})', f'B ({args.b})', args.fail)


def _confirm_rerun(args: argparse.Namespace) -> Any:
    """The rerun of `confirm_steps`: the two commits interleaved, as ``bench ab``."""

    def rerun(baseline: str, candidate: str, test_ids: List[str]) -> List[Any]:
        print(
            f'confirming: rerun of {baseline[:12]} (before the step) and {candidate[:12]} '
            f'(its first commit), {args.repeat} session(s) each ...',
            flush=True,
        )
        comparisons = _interleaved_ab(
            baseline,
            candidate,
            test_ids,
            args.repeat,
            args.rounds,
            args.timeout,
            args.tolerance,
            args.confidence,
        )
        from simharness.bench.compare import format_comparisons

        print(format_comparisons(comparisons, f'A ({baseline[:12]})', f'B ({candidate[:12]})'))
        return comparisons

    return rerun


def _cmd_history(args: argparse.Namespace) -> int:
    from simharness.bench.history import write_history

    if args.fail and not args.confirm:
        raise SimharnessValueError(
            '--fail needs --confirm: only a step that its rerun confirms is a regression'
        )
    out = args.out or os.path.dirname(os.path.abspath(args.storage.rstrip('/')))
    rerun = _confirm_rerun(args) if args.confirm else None
    path, history = write_history(
        args.storage,
        out,
        args.machine,
        args.tolerance,
        args.confidence,
        args.names,
        plots=not args.no_plots,
        penalty=args.penalty,
        rerun=rerun,
    )
    steps = [s for n in history.names for s in history.steps[n]]
    print(
        f'{len(history.points)} commits, {len(history.names)} benchmarks, {len(steps)} steps '
        f'(machine {history.machine})'
    )
    from simharness.bench.history import step_mark

    for s in sorted(steps, key=lambda s: s.index):
        print(
            f'  {s.name}: {step_mark(s)} from {s.commit[:12]} on'
            + (f' ({s.note})' if s.note else '')
        )
    print(f'history: {path}')
    if not args.no_plots:
        print(f'plots:   {os.path.join(out, "plots")}')
    regressions = [s for s in steps if s.regression]
    if args.confirm:
        slower = [s for s in steps if s.status is not None]
        print(
            f'{len(regressions)} confirmed regression(s) of {len(slower)} slower step(s)'
            + (
                ': ' + ', '.join(f'{s.name} at {s.commit[:12]}' for s in regressions)
                if regressions
                else ''
            )
        )
    return 1 if args.fail and regressions else 0


def run(args: argparse.Namespace) -> int:
    """Runs ``simharness bench <command>``; returns the exit code."""
    commands = {'run': _cmd_run, 'ab': _cmd_ab, 'compare': _cmd_compare, 'history': _cmd_history}
    try:
        return commands[args.bench_command](args)
    except SimharnessValueError as e:
        if getattr(args, 'verbose', False):
            raise
        print(f'error: {e}', file=sys.stderr)
        return 2
