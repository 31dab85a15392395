"""`simharness.tfquiet` in this process, with a fake TensorFlow (no real one is imported):
the import hook, ``SIMHARNESS_LOG_LEVEL`` and the logger of the lines dropped.

The real programs (a TFF-style one, one on the process stack) run as subprocesses in
tests/integration/test_quiet_programs.py.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import pytest

from simharness import tfquiet

#: A stand-in for TensorFlow: its import writes two start-up lines and a line of its own to
#: fd 2 (as TF's shared libraries do), its device probe the cuInit line.
FAKE_TF = """
import os, types
os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n')
os.write(2, b'I0000 00:00:1 12 port.cc:153] oneDNN custom operations are on.\\n')
os.write(2, b'a line of its own\\n')
probes = []
def _probe():
    probes.append(1)
    os.write(2, b'E0000 00:00:1 12 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\\n')
    return []
config = types.SimpleNamespace(list_physical_devices=_probe)
"""


@pytest.fixture
def fake_tensorflow(tmp_path, monkeypatch):
    """A fake ``tensorflow`` package first on the path; the real module (if loaded) is put
    back afterwards, and no hook is left behind."""
    (tmp_path / 'tensorflow').mkdir()
    (tmp_path / 'tensorflow' / '__init__.py').write_text(FAKE_TF, encoding='utf-8')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(tfquiet.LEVEL_ENV, raising=False)
    monkeypatch.setenv('TF_CPP_MIN_LOG_LEVEL', '0')  # ours: the hook must not need it
    saved = sys.modules.pop('tensorflow', None)
    hooks = list(sys.meta_path)
    # as before import simharness (this process has one when it has not loaded TF yet)
    sys.meta_path[:] = [f for f in hooks if not isinstance(f, tfquiet._QuietTensorFlowImport)]  # pylint: disable=protected-access
    try:
        yield
    finally:
        sys.meta_path[:] = hooks
        sys.modules.pop('tensorflow', None)
        if saved is not None:
            sys.modules['tensorflow'] = saved


def test_the_hook_imports_tensorflow_quietly_and_probes_its_devices(fake_tensorflow, capfd):
    tfquiet.install_import_hook()
    tf = importlib.import_module('tensorflow')
    assert capfd.readouterr().err == 'a line of its own\n'  # no start-up line, no cuInit
    assert tf.probes == [1]  # probed once, at the import
    assert type(tf.__loader__).__name__ == 'SourceFileLoader'  # its own loader again
    assert tf.__spec__.loader is tf.__loader__
    assert not any(
        isinstance(f, tfquiet._QuietTensorFlowImport)  # pylint: disable=protected-access
        for f in sys.meta_path
    )  # the hook is gone once TF is loaded


def test_a_tensorflow_loaded_before_is_only_probed(fake_tensorflow, capfd):
    importlib.import_module('tensorflow')  # before simharness: its lines are out
    assert 'oneDNN' in capfd.readouterr().err
    tfquiet.install_import_hook()
    assert sys.modules['tensorflow'].probes == [1]
    assert capfd.readouterr().err == ''  # the cuInit line is not


def test_simharness_log_level_info_lets_everything_through(fake_tensorflow, capfd, monkeypatch):
    monkeypatch.setenv(tfquiet.LEVEL_ENV, 'info')
    tfquiet.install_import_hook()
    importlib.import_module('tensorflow')
    err = capfd.readouterr().err
    assert 'oneDNN custom operations' in err and 'a line of its own' in err
    with tfquiet.quiet_stderr():
        os.write(2, b'I0000 00:00:1 12 cudart_stub.cc:31] Could not find cuda drivers\n')
    assert 'Could not find cuda drivers' in capfd.readouterr().err


def test_the_lines_dropped_are_logged_at_debug(capfd, caplog, monkeypatch):
    monkeypatch.delenv(tfquiet.LEVEL_ENV, raising=False)
    with caplog.at_level(logging.DEBUG, logger=tfquiet.DROPPED_LOGGER):
        with tfquiet.quiet_stderr():
            os.write(2, b'I0000 00:00:1 12 port.cc:153] oneDNN custom operations are on.\n')
            os.write(2, b'kept\n')
    assert capfd.readouterr().err == 'kept\n'
    assert [r.getMessage() for r in caplog.records if r.name == tfquiet.DROPPED_LOGGER] == [
        'I0000 00:00:1 12 port.cc:153] oneDNN custom operations are on.'
    ]


@pytest.mark.parametrize(
    'value, level',
    [
        ('', None),
        ('INFO', logging.INFO),
        ('debug', logging.DEBUG),
        ('Error', logging.ERROR),
        ('10', 10),
        ('loud', None),
    ],
)
def test_log_level_reads_names_and_numbers(monkeypatch, value, level):
    monkeypatch.setenv(tfquiet.LEVEL_ENV, value)
    assert tfquiet.log_level() == level
    assert tfquiet.shows_tensorflow_logs() is (level is not None and level <= logging.INFO)


def test_configure_logging_sets_the_simharness_logger_level(monkeypatch):
    logger = logging.getLogger('simharness')
    monkeypatch.setattr(logger, 'level', logger.level)  # restored afterwards
    monkeypatch.setenv(tfquiet.LEVEL_ENV, 'ERROR')
    tfquiet.configure_logging()
    assert logger.level == logging.ERROR
    monkeypatch.delenv(tfquiet.LEVEL_ENV)
    logger.setLevel(logging.NOTSET)
    tfquiet.configure_logging()  # unset: the program's logging decides
    assert logger.level == logging.NOTSET


class _FdHandler(logging.Handler):
    """Writes records to file descriptor 2 (as a handler on a terminal's stderr does)."""

    def emit(self, record):
        os.write(2, (self.format(record) + '\n').encode())


def test_nested_blocks_filter_once(capfd, monkeypatch):
    """TensorFlow's import runs inside `import_tensorflow`'s block and the hook's: the outer
    one filters, so a record of a dropped line (on a handler writing to stderr) is not
    caught, dropped and logged again by the outer block."""
    monkeypatch.delenv(tfquiet.LEVEL_ENV, raising=False)
    logger = logging.getLogger(tfquiet.DROPPED_LOGGER)
    handler = _FdHandler(logging.DEBUG)
    handler.setFormatter(logging.Formatter('%(levelname)s %(name)s: %(message)s'))  # the CLI's
    monkeypatch.setattr(logger, 'level', logging.DEBUG)
    logger.addHandler(handler)
    try:
        with tfquiet.quiet_stderr():
            with tfquiet.quiet_stderr():
                os.write(2, b'I0000 00:00:1 12 port.cc:153] oneDNN custom operations are on.\n')
            os.write(2, b'kept\n')
    finally:
        logger.removeHandler(handler)
    assert capfd.readouterr().err == (
        'kept\nDEBUG simharness.tensorflow: I0000 00:00:1 12 '
        'port.cc:153] oneDNN custom operations are on.\n'
    )
