"""Which GPUs this machine offers, found without importing TensorFlow.

::

    driver: detect_gpus()
              CUDA_VISIBLE_DEVICES set?  -> parse_cuda_visible_devices(value)
              else nvidia-smi on PATH?   -> parse_nvidia_smi_list(`nvidia-smi -L`)
              else                       -> []

Importing TensorFlow (or initialising CUDA) in the driver would cost seconds
and could grab GPU memory that the workers need, so discovery reads only
the environment and `nvidia-smi`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import List

_NVIDIA_SMI_TIMEOUT_S = 5.0
_GPU_LINE_RE = re.compile(r'^GPU (\d+):', re.MULTILINE)


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


def detect_gpus() -> List[int]:
    """The GPU ids available to this process, without importing TensorFlow.

    ``CUDA_VISIBLE_DEVICES`` wins when set (even to '', which means none);
    otherwise ``nvidia-smi -L`` is asked (5 s timeout). Any failure -- no
    nvidia-smi, no driver, a timeout, odd output -- means no GPU.

    Returns:
        The GPU ids (physical ids, as ``CUDA_VISIBLE_DEVICES`` takes them).
    """
    visible = os.environ.get('CUDA_VISIBLE_DEVICES')
    if visible is not None:
        return parse_cuda_visible_devices(visible)
    exe = shutil.which('nvidia-smi')
    if exe is None:
        return []
    try:
        result = subprocess.run([exe, '-L'], capture_output=True, text=True,
                                timeout=_NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError, ValueError):
        return []
    if result.returncode != 0:
        return []
    return parse_nvidia_smi_list(result.stdout)
