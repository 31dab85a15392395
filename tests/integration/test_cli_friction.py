"""The command line as a researcher meets it (issue 27): fast config errors, one-line model
errors, builders next to the config, sweeps that go on past a failed point, log levels, one
round numbering, resume notices, --version, no silent overwrite. Tiny configs on the thread
stack; `simharness.cli.main` runs in-process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simharness import cli
from simharness.experiments.runner import rounds as runner_rounds

TOML = """\
name = "fr"
[data]
dataset = "synthetic"
num_clients = 4
samples_per_client = 8
dim = 6
num_classes = 3
seed = 0
[model]
name = "mlp"
hidden_sizes = [4]
[algorithm]
batch_size = 4
[training]
rounds = 2
clients_per_round = 2
eval_every = 1
{training}
[stack]
kind = "thread"
{extra}
"""


def _config(folder: Path, training: str = '', extra: str = '') -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / 'fr.toml'
    path.write_text(TOML.format(training=training, extra=extra), encoding='utf-8')
    return path


def _run(capsys, *argv: str):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_config_errors_import_nothing_heavy(tmp_path):
    bad = _config(tmp_path).read_text().replace('rounds = 2', 'roundz = 2')
    (tmp_path / 'bad.toml').write_text(bad)
    code = textwrap.dedent(f"""
        import sys
        from simharness.cli import main
        assert main(['run', {str(tmp_path / 'missing.toml')!r}]) == 2
        assert main(['run', {str(tmp_path / 'bad.toml')!r}]) == 2
        assert main(['sweep', {str(tmp_path / 'bad.toml')!r}]) == 2
        heavy = [m for m in ('tensorflow', 'keras', 'pandas', 'matplotlib', 'ray', 'grpc')
                 if m in sys.modules]
        assert not heavy, heavy
    """)
    p = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 3 and all(ln.startswith('error: ') for ln in lines), lines
    assert 'does not exist' in lines[0] and 'training.roundz' in lines[1]


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(['--version'])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith('simharness ') and len(out.split()) >= 2


BUILDERS = """\
import keras
def good(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(num_classes)])
def narrow_in(input_shape, num_classes):
    return keras.Sequential([keras.Input((32,)), keras.layers.Dense(num_classes)])
def good2(input_shape, num_classes):
    return good(input_shape, num_classes)
def few_out(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(7)])
"""


@pytest.fixture(name='keras_config')
def _keras_config(tmp_path, monkeypatch):
    """A config with a Keras builder module next to it (not on sys.path, cwd elsewhere)."""
    folder = tmp_path / 'exp'
    path = _config(folder)
    path.write_text(
        path.read_text().replace(
            'name = "mlp"\nhidden_sizes = [4]', 'name = "keras"\nkeras = "frmods27:good"'
        )
    )
    (folder / 'frmods27.py').write_text(BUILDERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'path', list(sys.path))
    monkeypatch.setenv('PYTHONPATH', os.environ.get('PYTHONPATH', ''))
    yield path
    sys.modules.pop('frmods27', None)


@pytest.mark.parametrize(
    'builder, expected',
    [
        ('narrow_in', ('[6]', '32')),
        ('few_out', ('7 output(s)', '3 classes')),
    ],
)
def test_model_that_does_not_fit_the_data_is_one_error_line(
    keras_config, capsys, builder, expected
):
    rc, _, err = _run(
        capsys,
        'run',
        str(keras_config),
        '--results',
        'res',
        '--set',
        f'model.keras=frmods27:{builder}',
    )
    assert rc == cli.EXIT_USAGE
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: [model] keras'), err
    assert all(x in lines[0] for x in expected), lines[0]
    (run_dir,) = (keras_config.parent.parent / 'res' / 'fr').iterdir()
    assert not (run_dir / 'metrics.jsonl').exists()  # before the first round


def test_builder_next_to_the_config_is_found(keras_config, capsys):
    rc, out, _ = _run(capsys, 'run', str(keras_config), '--results', 'res', '--no-progress')
    assert rc == 0 and 'fr/default: 2 rounds' in out


def test_builder_module_not_found_gives_a_hint(keras_config, capsys):
    rc, _, err = _run(capsys, 'run', str(keras_config), '--set', 'model.keras=nomod27:f')
    assert rc == cli.EXIT_USAGE
    assert "no module 'nomod27'" in err and 'PYTHONPATH' in err
    assert str(keras_config.parent) in err


def test_sweep_runs_every_point_and_fails_at_the_end(keras_config, capsys):
    # The middle point's model does not fit the data: it fails, the last point still runs.
    with keras_config.open('a') as f:
        f.write(
            '[sweep.grid]\n"model.keras" = ["frmods27:good", "frmods27:few_out", '
            '"frmods27:good2"]\n'
        )
    rc, out, err = _run(
        capsys, 'sweep', str(keras_config), '--results', 'res', '--no-progress', '--jobs', '1'
    )
    assert rc == cli.EXIT_FAILED
    statuses = {
        d.name: json.loads((d / 'summary.json').read_text())['status']
        for d in (keras_config.parent.parent / 'res' / 'fr').iterdir()
        if d.is_dir()
    }
    assert sorted(statuses.values()) == ['complete', 'complete', 'failed'], statuses
    assert 'FAILED' in out and '1 of 3 sweep points failed' in err


def test_log_levels_and_round_numbering(tmp_path, capsys):
    path = _config(tmp_path, training='checkpoint_every = 1')
    res = str(tmp_path / 'res')
    rc, _, err = _run(capsys, 'run', str(path), '--results', res, '--log-level', 'error')
    assert rc == 0 and 'round' not in err, err
    rc, _, err = _run(capsys, 'run', str(path), '--results', res, '--restart', '-v')
    assert rc == 0
    lines = [ln for ln in err.splitlines() if ': round ' in ln]
    assert len(lines) == 2, err  # each round once (not also as an INFO record)
    # 0-based everywhere: console, metrics.jsonl, checkpoint names (rounds done = next round)
    assert 'round 0 (1/2 done)' in lines[0] and 'round 1 (2/2 done)' in lines[1]
    run_dir = tmp_path / 'res' / 'fr' / 'default'
    rows = [json.loads(x) for x in (run_dir / 'metrics.jsonl').read_text().splitlines()]
    assert [r['round'] for r in rows] == [0, 1]
    assert sorted(p.name for p in (run_dir / 'checkpoints').iterdir()) == [
        'ckpt-000001.npz',
        'ckpt-000002.npz',
    ]


def test_resumed_run_says_from_which_round(tmp_path, capsys):
    path = _config(tmp_path, training='checkpoint_every = 1')
    res = str(tmp_path / 'res')
    assert _run(capsys, 'run', str(path), '--results', res)[0] == 0
    run_dir = tmp_path / 'res' / 'fr' / 'default'
    summary = json.loads((run_dir / 'summary.json').read_text())
    summary['status'] = 'interrupted'  # as Ctrl-C after round 0 leaves it
    (run_dir / 'summary.json').write_text(json.dumps(summary))
    (run_dir / 'checkpoints' / 'ckpt-000002.npz').unlink()
    rc, _, err = _run(capsys, 'run', str(path), '--results', res)
    assert rc == 0
    assert 'resuming the unfinished run at round 1' in err, err
    assert err.index('resuming') < err.index('round 1 (2/2 done)')


def test_complete_run_is_not_overwritten(tmp_path, capsys):
    path = _config(tmp_path)
    res = str(tmp_path / 'res')
    assert _run(capsys, 'run', str(path), '--results', res, '--no-progress')[0] == 0
    metrics = tmp_path / 'res' / 'fr' / 'default' / 'metrics.jsonl'
    before = metrics.read_text()
    rc, out, _ = _run(capsys, 'run', str(path), '--results', res)
    assert rc == 0 and 'complete already' in out and metrics.read_text() == before
    path.write_text(path.read_text().replace('batch_size = 4', 'batch_size = 2'))
    rc, _, err = _run(capsys, 'run', str(path), '--results', res)
    assert rc == cli.EXIT_USAGE and 'complete run of another config' in err
    assert metrics.read_text() == before
    rc, out, _ = _run(capsys, 'run', str(path), '--results', res, '--restart', '--no-progress')
    assert rc == 0 and 'fr/default: 2 rounds' in out


def test_more_workers_than_cores_warns(caplog, monkeypatch):
    monkeypatch.setattr(runner_rounds, '_usable_cores', lambda: 2)
    with caplog.at_level(logging.WARNING, logger='simharness'):
        runner_rounds._warn_oversubscribed(64)  # pylint: disable=protected-access
        runner_rounds._warn_oversubscribed(2)  # pylint: disable=protected-access
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and '64' in warnings[0] and '2 usable CPU core' in warnings[0]


def test_more_workers_than_cores_through_the_api_warns(monkeypatch):
    """The Python API says what the CLI says (the CLI says it once, in its own words)."""
    import warnings as pywarnings  # pylint: disable=import-outside-toplevel
    from simharness import stacks  # pylint: disable=import-outside-toplevel
    from simharness.errors import OversubscribedWarning  # pylint: disable=import-outside-toplevel
    from simharness.runtime import pinning  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(pinning, 'usable_cpus', lambda: [0, 1])
    for n, warns in ((3, True), (2, False), (None, False)):  # None: one per usable core
        with pywarnings.catch_warnings(record=True) as seen:
            pywarnings.simplefilter('always')
            factory = stacks.process_executor_factory(num_workers=n)  # not started
            factory.close()
        got = [w for w in seen if issubclass(w.category, OversubscribedWarning)]
        assert len(got) == (1 if warns else 0)
        if warns:
            assert 'num_workers=3' in str(got[0].message) and '2 usable CPU' in str(got[0].message)
            assert got[0].filename == __file__  # points at the caller's line


def test_progress_bar_description_is_short():
    from simharness.experiments.config import config_from_dict  # pylint: disable=import-outside-toplevel
    import tomllib  # pylint: disable=import-outside-toplevel

    cfg = config_from_dict(tomllib.loads(TOML.format(training='', extra='')))
    desc = runner_rounds._bar_desc(  # pylint: disable=protected-access
        cfg, 'num_workers=2,clients_per_round=100,seed=0'
    )
    assert len(desc) <= runner_rounds.BAR_DESC_CHARS


@pytest.mark.xdist_group('fresh-import')
def test_python_api_is_quiet_about_tensorflow_start_up():
    from simharness.tfquiet import NOISE  # pylint: disable=import-outside-toplevel

    # A fresh interpreter without TF_CPP_MIN_LOG_LEVEL: `import simharness as tff`,
    # tff.learning, `import tensorflow as tf`, one op (tests/fresh_import.py; the same
    # process is test_tff_names_and_errors' subpackage check).
    from fresh_import import fresh_import_run  # pylint: disable=import-outside-toplevel

    p = fresh_import_run()
    # stdout: only the script's own lines (step 1's line is the other test's)
    assert p.returncode == 0 and [
        ln for ln in p.stdout.splitlines() if not ln.startswith('subpackages ')
    ] == ['tf 2'], (p.stdout, p.stderr)
    assert not [ln for ln in p.stderr.splitlines() if NOISE.search(ln)], p.stderr


def test_report_compares_what_varies_with_ints_as_ints(tmp_path, capsys):
    import shutil  # pylint: disable=import-outside-toplevel

    path = _config(tmp_path)
    assert _run(capsys, 'run', str(path), '--results', str(tmp_path / 'res'))[0] == 0
    exp = tmp_path / 'res' / 'fr'
    # The same run as if made on the process stack with 2 and 4 workers: config.toml says so.
    for n in (2, 4):
        shutil.copytree(exp / 'default', exp / f'w{n}')
        toml = (exp / f'w{n}' / 'config.toml').read_text()
        head, _, _ = toml.partition('[stack]')
        (exp / f'w{n}' / 'config.toml').write_text(
            head + f'[stack]\nkind = "process"\nnum_workers = {n}\nclients_per_worker = 8\n'
        )
    rc, _, _ = _run(capsys, 'report', str(exp))
    assert rc == 0
    md = (exp / 'report.md').read_text()
    assert 'clients_per_thread' not in md and 'clients_per_worker' not in md, md
    header = next(ln for ln in md.splitlines() if ln.startswith('| run'))
    cells = [c.strip() for c in header.strip('|').split('|')]
    assert len(cells) == len(set(cells)), header
    # ints stay ints (no '2.0') and nothing is 'nan', in every cell but the timings (a
    # clients/s of 62.0 holds '2.0' by chance)
    timed = {cells.index(c) for c in ('median round s', 'clients/s') if c in cells}
    rows = [
        [c.strip() for c in ln.strip('|').split('|')]
        for ln in md.splitlines()
        if ln.startswith('| ') and not ln.startswith('| run')
    ]
    text = '\n'.join(ln for ln in md.splitlines() if not ln.startswith('|'))
    kept = [c for r in rows for k, c in enumerate(r) if k not in timed] + [text]
    assert not [c for c in kept if '2.0' in c or 'nan' in c], md


def test_python_dash_m_simharness_is_the_command():
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    from simharness import __version__  # pylint: disable=import-outside-toplevel

    out = subprocess.run(
        [sys.executable, '-m', 'simharness', '--version'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and __version__ in out.stdout
    bad = subprocess.run(
        [sys.executable, '-m', 'simharness', 'run', 'missing.toml'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and 'missing.toml does not exist' in bad.stderr
