"""simharness.runtime.local.shm across processes: forked readers attach, read and never unlink.

Moved from tests/unit/test_runtime_shm.py (unit tests start no process, issue 17).
"""

from __future__ import annotations

import multiprocessing
import os
import sys

import numpy as np
import pytest

from simharness.runtime.local.shm import ShmArena, ShmAttachment, list_leaked_segments
from shm_trees import pack_tree, unpack_tree  # tests/shm_trees.py

pytestmark = [pytest.mark.process, pytest.mark.usefixtures('no_leaked_segments')]

HAS_DEV_SHM = os.path.isdir('/dev/shm')


def _exists(name: str) -> bool:
    return name in list_leaked_segments()


# -- a reader in another process ------------------------------------------------


def _child_reads(conn, packed):
    """Runs in a forked child: attach, read, close, report."""
    from multiprocessing import resource_tracker

    calls = []
    resource_tracker.register = lambda *a: calls.append(('register',) + a)
    resource_tracker.unregister = lambda *a: calls.append(('unregister',) + a)
    att = ShmAttachment()
    tree = unpack_tree(att, packed)
    result = (float(tree['a'].sum()), tree['b'][1].tolist(), tree['s'])
    att.close()
    conn.send((result, calls))
    conn.close()


@pytest.mark.skipif(sys.platform != 'linux', reason='uses the fork start method')
def test_child_process_reads_and_does_not_unlink():
    ctx = multiprocessing.get_context('fork')
    with ShmArena(4096) as arena:
        tree = {
            'a': np.arange(100, dtype=np.float32),
            'b': (np.zeros(1), np.array([1, 2, 3], np.int16)),
            's': 'text',
        }
        packed, _ = pack_tree(arena, tree)
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child_reads, args=(send, packed))
        child.start()
        send.close()
        assert recv.poll(10), 'child did not answer'
        result, tracker_calls = recv.recv()
        child.join(10)
        assert child.exitcode == 0
        assert result == (4950.0, [1, 2, 3], 'text')
        assert tracker_calls == []  # the reader never touched the tracker
        assert _exists(arena.name) or not HAS_DEV_SHM  # child exit did not unlink
        np.testing.assert_array_equal(arena.read(packed['a']), tree['a'])


def _child_closes_inherited_arena(arena, conn):
    arena.close()  # a forked copy: unmaps only
    conn.send(arena.closed)
    conn.close()


@pytest.mark.skipif(sys.platform != 'linux', reason='uses the fork start method')
def test_forked_copy_of_arena_does_not_unlink():
    ctx = multiprocessing.get_context('fork')
    with ShmArena(4096) as arena:
        ref = arena.write_array(np.arange(3, dtype=np.int8))
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child_closes_inherited_arena, args=(arena, send))
        child.start()
        send.close()
        assert recv.poll(10) and recv.recv() is True
        child.join(10)
        assert child.exitcode == 0
        assert _exists(arena.name) or not HAS_DEV_SHM
        np.testing.assert_array_equal(arena.read(ref), np.arange(3))
