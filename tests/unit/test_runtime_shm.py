"""Unit tests of simharness.runtime.local.shm (no TensorFlow, no process; the forked readers
are in tests/process/test_shm_across_processes.py)."""

from __future__ import annotations

import ast
import collections
import errno
import gc
import os
import pickle
import stat
import time

import numpy as np
import pytest

from simharness.errors import SimharnessTypeError, SimharnessValueError
from simharness.runtime.local import shm
from simharness.runtime.local.shm import (
    ALIGNMENT,
    ShmArena,
    ShmAttachment,
    SlotRef,
    list_leaked_segments,
    reap_orphaned_segments,
)
from shm_trees import pack_tree, unpack_tree

HAS_DEV_SHM = os.path.isdir('/dev/shm')
needs_dev_shm = pytest.mark.skipif(not HAS_DEV_SHM, reason='no /dev/shm')

pytestmark = pytest.mark.usefixtures('no_leaked_segments')  # tests/conftest.py

Point = collections.namedtuple('Point', ['x', 'y'])


def _exists(name: str) -> bool:
    return name in list_leaked_segments()


# -- arena basics --------------------------------------------------------------


@needs_dev_shm
def test_name_prefix_and_owner_only_permissions():
    with ShmArena(1000) as arena:
        assert arena.name.startswith(f'simharness_{os.getpid()}_')
        st = os.stat(f'/dev/shm/{arena.name}')
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.getuid()
        assert arena.capacity >= 1000 and arena.capacity % 64 == 0


@needs_dev_shm
def test_permissions_ignore_a_hostile_umask():
    old = os.umask(0o277)  # would leave the owner read-only
    try:
        with ShmArena(64) as arena:
            assert stat.S_IMODE(os.stat(f'/dev/shm/{arena.name}').st_mode) == 0o600
    finally:
        os.umask(old)


def test_alloc_offsets_are_aligned_and_disjoint():
    sizes = [1, 63, 64, 65, 0, 100, 7, 0, 4096, 3]
    with ShmArena(1 << 16) as arena:
        offsets = [arena.alloc(n) for n in sizes]
        for off, n in zip(offsets, sizes):
            assert off % ALIGNMENT == 0
            if n:  # the address is aligned too (segments are page aligned)
                assert arena.view(off, np.uint8, (n,)).ctypes.data % ALIGNMENT == 0
        spans = sorted((o, o + n) for o, n in zip(offsets, sizes) if n)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start
        assert arena.used % ALIGNMENT == 0
        arena.reset()
        assert arena.used == 0 and arena.alloc(10) == 0


def test_alloc_over_capacity_raises():
    with ShmArena(4096) as arena:
        arena.alloc(4000)
        with pytest.raises(SimharnessValueError, match='full'):
            arena.alloc(100)
        with pytest.raises(SimharnessValueError, match='>= 0'):
            arena.alloc(-1)
        with pytest.raises(SimharnessTypeError):
            arena.alloc(1.5)


def test_full_dev_shm_is_an_error_not_a_sigbus(monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(shm.os, 'posix_fallocate', no_space, raising=False)
    with pytest.raises(SimharnessValueError, match='not enough shared memory'):
        ShmArena(1 << 20)


def test_failed_growth_keeps_the_old_segment(monkeypatch):
    with ShmArena(4096) as arena:
        ref = arena.write_array(np.arange(4, dtype=np.int32))
        name = arena.name

        def no_space(fd, offset, length):
            raise OSError(errno.ENOSPC, 'No space left on device')

        monkeypatch.setattr(shm.os, 'posix_fallocate', no_space, raising=False)
        with pytest.raises(SimharnessValueError, match='not enough shared memory'):
            arena.ensure_capacity(1 << 20)
        assert arena.name == name
        np.testing.assert_array_equal(arena.read(ref), np.arange(4))


@pytest.mark.parametrize('capacity', [0, -5])
def test_bad_capacity(capacity):
    with pytest.raises(SimharnessValueError, match='capacity'):
        ShmArena(capacity)


@pytest.mark.parametrize(
    'dtype',
    [
        np.float32,
        np.float64,
        np.int32,
        np.int64,
        np.bool_,
        np.uint8,
        np.float16,
        np.complex64,
        '>i4',
        'datetime64[ns]',
    ],
)
def test_write_read_roundtrip_dtypes(dtype):
    rng = np.random.default_rng(0)
    src = (rng.standard_normal((3, 5)) * 100).astype(dtype)
    with ShmArena(4096) as arena, ShmAttachment() as att:
        ref = arena.write_array(src)
        assert ref.dtype == np.dtype(dtype) and ref.shape == (3, 5)
        assert ref.nbytes == src.nbytes
        out = att.read(pickle.loads(pickle.dumps(ref)))
        assert out.dtype == src.dtype
        np.testing.assert_array_equal(out, src)
        np.testing.assert_array_equal(arena.read(ref), src)


def test_zero_size_and_zero_d_arrays():
    with ShmArena(4096) as arena, ShmAttachment() as att:
        empty = np.zeros((0, 7), np.float32)
        scalar = np.array(3.5, np.float64)
        r_empty = arena.write_array(empty)
        r_scalar = arena.write_array(scalar)
        assert r_empty.nbytes == 0 and r_scalar.shape == ()
        out_empty, out_scalar = att.read(r_empty), att.read(r_scalar)
        assert out_empty.shape == (0, 7) and out_empty.dtype == np.float32
        assert out_scalar.shape == () and out_scalar == 3.5


def test_non_contiguous_input_is_stored_contiguous():
    src = np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2].T
    with ShmArena(4096) as arena, ShmAttachment() as att:
        out = att.read(arena.write_array(src))
        np.testing.assert_array_equal(out, src)
        assert out.flags.c_contiguous


def test_views_are_zero_copy():
    with ShmArena(4096) as arena, ShmAttachment() as att:
        ref = arena.write_array(np.zeros(8, np.float32))
        writer_view = arena.read(ref)
        reader_view = att.read(ref)
        writer_view[3] = 42.0
        assert reader_view[3] == 42.0
        assert np.shares_memory(writer_view, arena.view(ref.offset, np.float32, (8,)))
        assert not reader_view.flags.writeable
        with pytest.raises(ValueError):
            reader_view[0] = 1.0


def test_write_array_copies_its_input():
    src = np.ones(4, np.int32)
    with ShmArena(4096) as arena:
        ref = arena.write_array(src)
        src[:] = 7
        np.testing.assert_array_equal(arena.read(ref), np.ones(4, np.int32))


def test_write_array_rejects_non_numeric():
    with ShmArena(4096) as arena:
        with pytest.raises(SimharnessTypeError):
            arena.write_array(np.array(['a', 'b']))
        with pytest.raises(SimharnessTypeError):
            arena.write_array(np.array([object()]))
        with pytest.raises(SimharnessTypeError):
            arena.write_array([1.0, 2.0])


def test_view_out_of_bounds_raises():
    with ShmArena(4096) as arena:
        with pytest.raises(SimharnessValueError, match='outside'):
            arena.view(4096 - 8, np.float64, (2,))


def test_large_array_roundtrip():
    src = np.arange(16 * 1024 * 1024, dtype=np.float32)  # 64 MiB
    with ShmArena(1 << 20) as arena, ShmAttachment() as att:
        packed, nbytes = pack_tree(arena, {'w': src})
        assert nbytes == src.nbytes and arena.capacity >= src.nbytes
        out = att.read(packed['w'])
        assert out[0] == 0 and out[-1] == src[-1]
        np.testing.assert_array_equal(out[::4097], src[::4097])


# -- growth --------------------------------------------------------------------


def test_ensure_capacity_grows_at_least_double_and_keeps_data():
    with ShmArena(4096) as arena:
        first = arena.name
        ref = arena.write_array(np.arange(10, dtype=np.int64))
        assert arena.ensure_capacity(100) is False
        assert arena.ensure_capacity(4096) is False
        assert arena.ensure_capacity(5000) is True
        assert arena.name != first and arena.capacity >= 8192
        assert not _exists(first)
        np.testing.assert_array_equal(arena.view(ref.offset, np.int64, (10,)), np.arange(10))
        assert arena.used == 128
        big = arena.capacity
        assert arena.ensure_capacity(10 * big) is True
        assert arena.capacity >= 10 * big


def test_attachment_reattaches_after_growth():
    with ShmArena(4096) as arena, ShmAttachment() as att:
        np.testing.assert_array_equal(att.read(arena.write_array(np.ones(3))), 1)
        old = arena.name
        arena.reset()
        packed, _ = pack_tree(arena, [np.full(2000, 2.0)])  # 16 kB: grows
        assert arena.name != old and packed[0].segment_name == arena.name
        np.testing.assert_array_equal(att.read(packed[0]), 2.0)
        assert set(att.names) == {old, arena.name}
        att.release(old)
        assert att.names == (arena.name,)


# -- lifetime ------------------------------------------------------------------


def test_close_unlinks_and_is_idempotent():
    arena = ShmArena(4096)
    name = arena.name
    assert _exists(name) or not HAS_DEV_SHM
    arena.close()
    assert arena.closed and not _exists(name)
    arena.close()
    with pytest.raises(SimharnessValueError, match='closed'):
        arena.alloc(1)


def test_exception_inside_with_unlinks():
    with pytest.raises(RuntimeError, match='boom'):
        with ShmArena(4096) as arena:
            name = arena.name
            raise RuntimeError('boom')
    assert arena.closed and not _exists(name)


def test_views_outlive_close_without_crashing():
    arena = ShmArena(4096)
    att = ShmAttachment()
    ref = arena.write_array(np.arange(5, dtype=np.float64))
    mine, theirs = arena.read(ref), att.read(ref)
    arena.close()
    att.close()
    # Both mappings stay valid while the views live (no segfault).
    np.testing.assert_array_equal(mine, np.arange(5))
    np.testing.assert_array_equal(theirs, np.arange(5))
    assert not _exists(ref.segment_name)


def test_finalizer_unlinks_and_warns():
    arena = ShmArena(4096)
    name = arena.name
    with pytest.warns(ResourceWarning, match='not closed'):
        del arena
        gc.collect()
    assert not _exists(name)


def test_arena_does_not_pickle():
    with ShmArena(4096) as arena:
        with pytest.raises(SimharnessTypeError):
            pickle.dumps(arena)


def test_attachment_of_missing_segment_raises():
    with ShmAttachment() as att:
        with pytest.raises(SimharnessValueError, match='does not exist'):
            att.read(SlotRef('simharness_0_doesnotexist', 0, '<f4', (1,)))
    with pytest.raises(SimharnessValueError, match='closed'):
        att.attach('x')


# -- reaping segments of dead creators ------------------------------------------


def _dead_pid() -> int:
    """A pid no process can have: above the kernel's pid_max."""
    try:
        with open('/proc/sys/kernel/pid_max', encoding='ascii') as f:
            return int(f.read()) + 1
    except (OSError, ValueError):  # pragma: no cover - not Linux
        return 2**22 + 1


def _make_segment(pid, uid=None) -> str:
    """Creates ``simharness_<pid>_<hex>`` as a crashed creator would leave it."""
    import _posixshmem

    name = f'simharness_{pid}_test{os.urandom(4).hex()}'
    fd = _posixshmem.shm_open('/' + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        os.ftruncate(fd, 4096)
        if uid is not None:
            os.fchown(fd, uid, -1)
    finally:
        os.close(fd)
    return name


@pytest.fixture
def made_segments():
    """Names of test segments; whatever is left of them is removed afterwards."""
    names = []
    yield names
    for name in names:
        try:
            os.unlink(os.path.join('/dev/shm', name))
        except FileNotFoundError:
            pass


@needs_dev_shm
def test_reap_removes_segments_of_dead_pids_only(made_segments):
    dead = [_make_segment(_dead_pid()), _make_segment(_dead_pid())]
    live = [_make_segment(os.getpid()), _make_segment(1)]  # this process, and init
    made_segments += dead + live
    with ShmArena(100) as arena:  # a real segment of this (live) process
        removed = reap_orphaned_segments()
        # Each dead one removed by this call, or, in a parallel run, by another process's
        # reaper (every pool's start reaps) a moment before: gone either way.
        assert all(n in removed or not _exists(n) for n in dead)
        assert not set(live) & set(removed) and arena.name not in removed
        assert not any(_exists(n) for n in dead)
        assert all(_exists(n) for n in live) and _exists(arena.name)
        assert not set(dead) & set(reap_orphaned_segments())  # idempotent


@needs_dev_shm
def test_reap_treats_a_reused_pid_as_dead(made_segments, monkeypatch):
    import psutil

    name = _make_segment(1)
    made_segments.append(name)
    # pid 1 "started" an hour after the segment was made: it is not its creator.
    real = psutil.Process.create_time
    monkeypatch.setattr(
        psutil.Process,
        'create_time',
        lambda self: time.time() + 3600 if self.pid == 1 else real(self),
    )
    assert name in reap_orphaned_segments()
    assert not _exists(name)


@needs_dev_shm
def test_reap_keeps_a_segment_made_just_after_its_creator_started(made_segments, monkeypatch):
    # psutil's start times are exact to the second only: a fresh creator is not a reuse.
    import psutil

    name = _make_segment(1)
    made_segments.append(name)
    # Only pid 1 is made to look fresh: the reap below sees every segment on the machine,
    # and a live process' older segments must keep their real judgement (patching every
    # process' start time made this test unlink the live arenas of tests running beside it).
    real = psutil.Process.create_time
    monkeypatch.setattr(
        psutil.Process,
        'create_time',
        lambda self: time.time() + 0.5 if self.pid == 1 else real(self),
    )
    assert name not in reap_orphaned_segments()
    assert _exists(name)


@needs_dev_shm
def test_reap_keeps_a_creator_it_may_not_inspect(made_segments, monkeypatch):
    import psutil

    name = _make_segment(1)
    made_segments.append(name)

    def denied(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, 'create_time', denied)
    assert name not in reap_orphaned_segments()
    assert _exists(name)


@needs_dev_shm
@pytest.mark.skipif(os.geteuid() != 0, reason='only root can give a segment to another user')
def test_reap_leaves_other_users_segments(made_segments):
    name = _make_segment(_dead_pid(), uid=os.getuid() + 4242)
    made_segments.append(name)
    assert name not in reap_orphaned_segments()
    assert _exists(name)


@needs_dev_shm
def test_reap_ignores_names_without_a_pid(made_segments):
    import _posixshmem

    name = f'simharness_notapid_{os.urandom(4).hex()}'
    fd = _posixshmem.shm_open('/' + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    os.close(fd)
    made_segments.append(name)
    assert name not in reap_orphaned_segments()
    assert _exists(name)


# -- trees ---------------------------------------------------------------------


def test_pack_unpack_nested_tree():
    tree = {
        'weights': [np.ones((2, 3), np.float32), np.arange(4, dtype=np.int64)],
        'point': Point(np.array(1.5), 7),
        'ordered': collections.OrderedDict(b=np.zeros(0, np.float16), a=b'raw'),
        'meta': ('name', None, 3.0, np.float32(2.0)),
        'strings': np.array(['x', 'yy']),
        'objects': np.array([{'k': 1}], dtype=object),
        'mask': np.array([True, False]),
    }
    with ShmArena(4096) as arena, ShmAttachment() as att:
        packed, nbytes = pack_tree(arena, tree)
        expected = 24 + 32 + 8 + 0 + 2
        assert nbytes == expected
        assert isinstance(packed['weights'][0], SlotRef)
        assert isinstance(packed['point'], Point)
        assert isinstance(packed['point'].x, SlotRef) and packed['point'].y == 7
        assert isinstance(packed['ordered'], collections.OrderedDict)
        assert list(packed['ordered']) == ['b', 'a']
        assert packed['meta'] == tree['meta']
        assert packed['strings'] is tree['strings']  # travels pickled
        assert packed['objects'] is tree['objects']
        packed = pickle.loads(pickle.dumps(packed))

        views = unpack_tree(att, packed)
        copies = unpack_tree(att, packed, copy=True)
        for out in (views, copies):
            np.testing.assert_array_equal(out['weights'][0], tree['weights'][0])
            np.testing.assert_array_equal(out['weights'][1], tree['weights'][1])
            assert isinstance(out['point'], Point) and out['point'].x == 1.5
            assert out['ordered']['b'].shape == (0,) and out['ordered']['a'] == b'raw'
            assert out['mask'].dtype == np.bool_
            np.testing.assert_array_equal(out['strings'], tree['strings'])
        assert not views['weights'][0].flags.writeable
        assert copies['weights'][0].flags.writeable
        assert not np.shares_memory(copies['weights'][0], views['weights'][0])
        arena.read(packed['weights'][0])[0, 0] = 9.0
        assert views['weights'][0][0, 0] == 9.0
        assert copies['weights'][0][0, 0] == 1.0


def test_pack_tree_appends_and_unpacks_with_the_arena():
    with ShmArena(4096) as arena:
        p1, _ = pack_tree(arena, [np.ones(3)])
        p2, _ = pack_tree(arena, [np.full(3, 2.0)])
        assert p2[0].offset >= p1[0].offset + 64
        np.testing.assert_array_equal(unpack_tree(arena, p1)[0], 1.0)
        np.testing.assert_array_equal(unpack_tree(arena, p2)[0], 2.0)


def test_pack_tree_passes_plain_values_through():
    with ShmArena(4096) as arena:
        tree = [1, 'a', b'b', None, {'k': (2.0,)}]
        packed, nbytes = pack_tree(arena, tree)
        assert packed == tree and nbytes == 0 and arena.used == 0


def _module_level_imports(path):
    """Names imported by the module-level code of `path` (not inside functions)."""
    with open(path, encoding='utf-8') as f:
        names, todo = [], list(ast.parse(f.read()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or '')
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, 'finalbody', [])
            todo += [s for h in getattr(node, 'handlers', []) for s in h.body]
    return names


@pytest.mark.parametrize(
    'module', ['__init__', 'local/__init__', 'local/shm', 'pinning', 'resources']
)
def test_runtime_imports_neither_tensorflow_nor_executors(module):
    runtime = os.path.dirname(os.path.dirname(shm.__file__))  # simharness/runtime
    path = os.path.join(runtime, f'{module}.py')
    for name in _module_level_imports(path):
        assert not name.startswith(('tensorflow', 'simharness.executors')), (module, name)
