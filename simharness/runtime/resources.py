"""Which GPUs this machine offers, found without importing TensorFlow.

::

    driver: discover_gpus() -> GpuInventory(ids, checked)    (detect_gpus(): the ids)
              CUDA_VISIBLE_DEVICES set?  -> parse_cuda_visible_devices(value)
              else nvidia-smi on PATH?   -> parse_nvidia_smi_list(`nvidia-smi -L`)
              else /proc/driver/nvidia/gpus/* (one entry per GPU, PCI order)
              else                       -> []

Importing TensorFlow (or initialising CUDA) in the driver would cost seconds
and could grab GPU memory that the workers need, so discovery reads only
the environment, `nvidia-smi` and the driver's /proc entries. `checked`
says what was looked at, for error messages (`pinning.check_gpus_exist`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from typing import List, Tuple

_NVIDIA_SMI_TIMEOUT_S = 5.0
_GPU_LINE_RE = re.compile(r'^GPU (\d+):', re.MULTILINE)
#: One directory per GPU (named by PCI bus id) while the NVIDIA driver is loaded.
PROC_NVIDIA_GPUS = '/proc/driver/nvidia/gpus'


def parse_cuda_visible_devices(value: str) -> List[int]:
    """Parses a ``CUDA_VISIBLE_DEVICES`` value into GPU ids.

    Follows CUDA: entries are comma-separated and the list ends at the first
    entry that is not a non-negative integer (so '' and '-1' hide every GPU).
    UUID and MIG entries ('GPU-...', 'MIG-...') are therefore not reported.
    Repeated ids are kept once.

    Args:
        value: the variable's value.

    Returns:
        The GPU ids, in order.
    """
    ids: List[int] = []
    for entry in value.split(','):
        entry = entry.strip()
        if not entry.isdigit():
            break
        if int(entry) not in ids:
            ids.append(int(entry))
    return ids


def parse_nvidia_smi_list(text: str) -> List[int]:
    """Parses the output of ``nvidia-smi -L`` into GPU ids.

    Lines look like ``GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)``; MIG
    lines under a GPU are ignored.

    Args:
        text: the command's standard output.

    Returns:
        The GPU ids, in order.
    """
    return [int(m.group(1)) for m in _GPU_LINE_RE.finditer(text)]


@dataclasses.dataclass(frozen=True)
class GpuInventory:
    """The GPUs found and how they were looked for.

    Attributes:
        ids: the GPU ids (physical ids, as ``CUDA_VISIBLE_DEVICES`` takes them).
        checked: what was looked at, e.g. ``"CUDA_VISIBLE_DEVICES='0,1'"`` or
            ``'CUDA_VISIBLE_DEVICES (unset), nvidia-smi (not on PATH), ...'``.
    """

    ids: Tuple[int, ...]
    checked: str


def discover_gpus() -> GpuInventory:
    """The GPUs available to this process, without importing TensorFlow.

    ``CUDA_VISIBLE_DEVICES`` wins when set (even to '', which means none);
    otherwise ``nvidia-smi -L`` is asked (5 s timeout); without nvidia-smi
    on the PATH, the entries of /proc/driver/nvidia/gpus are counted. Any
    failure -- no driver, a timeout, odd output -- means no GPU.

    Returns:
        The GPU ids found and a description of what was checked.
    """
    visible = os.environ.get('CUDA_VISIBLE_DEVICES')
    if visible is not None:
        return GpuInventory(
            tuple(parse_cuda_visible_devices(visible)), f'CUDA_VISIBLE_DEVICES={visible!r}'
        )
    checked = 'CUDA_VISIBLE_DEVICES (unset)'
    exe = shutil.which('nvidia-smi')
    if exe is not None:
        try:
            result = subprocess.run(
                [exe, '-L'],
                capture_output=True,
                text=True,
                timeout=_NVIDIA_SMI_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError, UnicodeDecodeError, ValueError) as e:
            return GpuInventory((), f'{checked}, nvidia-smi -L (failed: {e})')
        if result.returncode != 0:
            why = (result.stderr or result.stdout or '').strip().splitlines()
            return GpuInventory(
                (),
                f'{checked}, nvidia-smi -L (exit {result.returncode}'
                + (f': {why[0]}' if why else '')
                + ')',
            )
        return GpuInventory(
            tuple(parse_nvidia_smi_list(result.stdout)), f'{checked}, nvidia-smi -L'
        )
    checked += ', nvidia-smi (not on PATH)'
    try:
        entries = os.listdir(PROC_NVIDIA_GPUS)
    except OSError:
        return GpuInventory((), f'{checked}, {PROC_NVIDIA_GPUS} (absent)')
    return GpuInventory(tuple(range(len(entries))), f'{checked}, {PROC_NVIDIA_GPUS}')


def detect_gpus() -> List[int]:
    """The GPU ids available to this process, without importing TensorFlow.

    Returns:
        ``list(discover_gpus().ids)``: physical ids, as
        ``CUDA_VISIBLE_DEVICES`` takes them.
    """
    return list(discover_gpus().ids)
