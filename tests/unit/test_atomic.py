"""`simharness.atomic`, the one atomic file writer (results, .npz clients, benchmark
history, release CSVs, SQLite client data)."""

import errno
import os
import sqlite3
import stat
import sys

import pytest

from simharness import atomic


def _names(d):
    return sorted(p.name for p in d.iterdir())


def test_a_write_replaces_the_file_with_a_normal_mode_and_leaves_no_temp(tmp_path):
    target = tmp_path / 'a.txt'
    atomic.write_text(target, 'old')
    atomic.write_text(target, 'new')
    assert target.read_text() == 'new' and _names(tmp_path) == ['a.txt']
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_a_failing_block_keeps_the_old_file_and_removes_the_temp(tmp_path):
    target = tmp_path / 'a.bin'
    atomic.write_bytes(target, b'old')
    with pytest.raises(KeyError):
        with atomic.atomic_open(target, 'wb') as f:
            f.write(b'half')
            assert [atomic.is_temp_file(n) for n in _names(tmp_path)] == [True, False]
            raise KeyError('boom')
    assert target.read_bytes() == b'old' and _names(tmp_path) == ['a.bin']


class _Interrupt(BaseException):
    pass


def _interrupted_at_line(n, write):
    """Runs `write()` with a `_Interrupt` raised at its `n`-th executed line (any frame, the
    standard library's included): where a signal handler's exception can land. Returns
    whether it was raised (False: `write` finished in fewer lines)."""
    seen = [0]

    def trace(frame, event, arg):  # pylint: disable=unused-argument
        if event == 'line':
            seen[0] += 1
            if seen[0] == n:
                raise _Interrupt()
        return trace

    sys.settrace(trace)
    try:
        write()
    except _Interrupt:
        return True
    finally:
        sys.settrace(None)
    return False


@pytest.mark.parametrize('how', ['write_bytes', 'atomic_path'])
def test_an_exception_landing_on_any_line_leaves_no_temp_file(tmp_path, how):
    # The CLI turns SIGTERM into an exception in the main thread, at whatever line runs then
    # (seen in CI: a temp file left when it landed between the temp file's creation and the
    # `try` that removes it).
    target = tmp_path / 'w.npz'
    atomic.write_bytes(target, b'old')

    def write():
        if how == 'write_bytes':
            atomic.write_bytes(target, b'new')
        else:
            with atomic.atomic_path(target) as p:
                p.write_bytes(b'new')

    n = 1
    while _interrupted_at_line(n, write):
        assert not [x for x in _names(tmp_path) if atomic.is_temp_file(x)], n
        assert target.read_bytes() in (b'old', b'new'), n
        n += 1
    assert n > 20 and target.read_bytes() == b'new'


def test_newline_is_passed_to_text_mode(tmp_path):
    target = tmp_path / 'rows.csv'
    with atomic.atomic_open(target, 'w', newline='') as f:
        f.write('a,b\r\n')
    assert target.read_bytes() == b'a,b\r\n'


def test_an_os_error_names_the_final_path(tmp_path):
    missing = tmp_path / 'no-such-dir' / 'x.json'
    with pytest.raises(OSError) as info:
        atomic.write_text(missing, '{}')
    assert info.value.errno == errno.ENOENT and info.value.filename == str(missing)
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"):
        with atomic.atomic_open(tmp_path / 'y', 'a'):
            pass


def test_atomic_path_hands_a_temp_path_to_a_writer_that_opens_it_itself(tmp_path):
    target = tmp_path / 'db.sqlite'
    with atomic.atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and atomic.is_temp_file(tmp) and not target.exists()
        with sqlite3.connect(tmp) as con:
            con.execute('CREATE TABLE t (x INTEGER)')
        con.close()
    assert _names(tmp_path) == ['db.sqlite']
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_bytes(b'not a database')
            raise RuntimeError('stop')
    with sqlite3.connect(target) as con:  # the old file, whole
        assert con.execute('SELECT count(*) FROM t').fetchone() == (0,)
    con.close()
    assert _names(tmp_path) == ['db.sqlite']
