"""How a process ended, in words: the cause an error message gives for a worker or a job
process that died (`describe_exit`), from its exit status alone."""

from __future__ import annotations

import signal
from typing import Optional

__all__ = ['describe_exit']


def describe_exit(exitcode: Optional[int]) -> str:
    """The likely cause of exit status `exitcode` (negative: the signal that ended the
    process, as `multiprocess` and `subprocess` give it; None: not known)."""
    if exitcode is None:
        return 'unknown'
    if exitcode == -signal.SIGKILL:
        return 'killed with SIGKILL (kill -9, or the kernel OOM killer: check dmesg)'
    if exitcode == -signal.SIGTERM:
        return (
            'terminated by SIGTERM (an OOM killer such as earlyoom or systemd-oomd, '
            'systemctl stop, Slurm scancel, or kill)'
        )
    if exitcode == -signal.SIGSEGV:
        return 'segmentation fault in native code'
    if exitcode == -signal.SIGABRT:
        return 'aborted (a native assertion, or a misaligned dlpack view)'
    if exitcode == -signal.SIGBUS:
        return 'bus error (shared memory exhausted?)'
    if exitcode < 0:
        try:
            return f'killed by signal {signal.Signals(-exitcode).name}'
        except ValueError:
            return f'killed by signal {-exitcode}'
    return f'exited with code {exitcode}'
