"""TensorFlow op libraries of the driver (custom ops) loaded in its workers too.

A package such as ``tensorflow_text`` registers its ops when its Python
module loads a shared object (``tf.load_op_library``). A graph that uses
them (a client dataset tokenized with ``tf_text.WhitespaceTokenizer``, a
``tf_computation`` that calls such an op) can only be rebuilt in a process
that loaded the same library: a worker process that never imported the
package fails with ``Op type not registered``. TFF's own runtime runs its
computations in the user's process, where the ops are registered.

`loaded` lists, in the driver, the op libraries mapped into the process:
shared objects of an installed package other than TensorFlow itself whose
ELF dynamic section needs ``libtensorflow_framework`` (read from
``/proc/self/maps``; Linux only, elsewhere none). Each is named by its
package and its path inside the package, so that a worker on another
machine finds its own installed copy. The driver's executor sends the list
whenever it grew (`Op.LOAD_OP_LIBRARIES`); the worker `expect`s them and
loads them when an operation first fails for an op it does not know
(`load_expected_for`), then runs that operation again: a worker whose graphs
use no custom op pays nothing (tensorflow_text's 23 libraries take ~0.3 s
to load).

Nothing but these names crosses the seam; no Python object is sent.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import struct
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ['expect', 'load', 'load_expected_for', 'loaded', 'needs_tensorflow']

log = logging.getLogger(__name__)

#: Top-level packages whose libraries every process that imports TensorFlow loads itself.
_OWN = frozenset({'tensorflow', 'tensorflow_io_gcs_filesystem', 'keras', 'tf_keras'})
_MAPS = '/proc/self/maps'

_lock = threading.Lock()
_modules_seen = -1  # len(sys.modules) when `_found` was computed
_found: Tuple[Tuple[str, str], ...] = ()
_verdicts: Dict[str, Optional[Tuple[str, str]]] = {}  # path -> (package, relative) or None
_loaded_here: Dict[Tuple[str, str], str] = {}  # what `load` loaded: -> its path
_expected: List[Tuple[str, str]] = []  # the driver's libraries this process has not loaded
_MISSING_OP = 'Op type not registered'


def loaded() -> Tuple[Tuple[str, str], ...]:
    """The op libraries mapped into this process, as ``(package, path in the package)``.

    Computed again only when ``sys.modules`` grew (op libraries come with
    imports): otherwise the same tuple object, so that a caller can tell
    "unchanged" by identity at the cost of one ``len``.
    """
    global _modules_seen, _found
    n = len(sys.modules)
    if n == _modules_seen:
        return _found
    with _lock:
        if n != _modules_seen:
            found = _scan()
            if found != _found:
                _found = found
            _modules_seen = n
        return _found


def _scan() -> Tuple[Tuple[str, str], ...]:
    try:
        with open(_MAPS) as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if '.so' in line}
    except OSError:  # not Linux, or no /proc
        return ()
    out = []
    for path in sorted(paths):
        if path not in _verdicts:
            _verdicts[path] = _op_library(path)
        verdict = _verdicts[path]
        if verdict is not None:
            out.append(verdict)
    return tuple(out)


def _op_library(path: str) -> Optional[Tuple[str, str]]:
    """``(package, relative path)`` when `path` is a TF extension of an installed package."""
    if not path.startswith('/') or not (path.endswith('.so') or '.so.' in path):
        return None
    # The deepest entry of sys.path that holds it (a project directory on sys.path may
    # hold the virtual environment whose site-packages holds the package).
    roots = [e.rstrip(os.sep) + os.sep for e in sys.path if e and os.path.isabs(e)]
    root = max((r for r in roots if path.startswith(r)), key=len, default=None)
    if root is None:
        return None
    package, _, rel = path[len(root) :].partition(os.sep)
    if not rel or package in _OWN or not package.isidentifier():
        return None
    try:
        return (package, rel) if needs_tensorflow(path) else None
    except (OSError, struct.error, ValueError):
        return None


def needs_tensorflow(path: str) -> bool:
    """Whether the ELF shared object at `path` names ``libtensorflow_framework`` among the
    libraries it needs (``DT_NEEDED``): it registers ops or kernels with TensorFlow."""
    with open(path, 'rb') as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b'\x7fELF' or head[4] != 2 or head[5] != 1:
            return False  # 64-bit little-endian ELF only (every TF platform of today)
        (shoff,) = struct.unpack_from('<Q', head, 0x28)
        shentsize, shnum = struct.unpack_from('<HH', head, 0x3A)
        if not shoff or shentsize < 64 or not shnum:
            return False
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
        sections = [struct.unpack_from('<IIQQQQIIQQ', table, i * shentsize) for i in range(shnum)]
        for s in sections:
            if s[1] != 6 or s[6] >= len(sections):  # SHT_DYNAMIC, and its string table
                continue
            strtab = sections[s[6]]
            f.seek(s[4])
            dynamic = f.read(s[5])
            f.seek(strtab[4])
            strings = f.read(strtab[5])
            for i in range(0, len(dynamic) - 15, 16):
                tag, value = struct.unpack_from('<qQ', dynamic, i)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1 and strings.startswith(b'libtensorflow_framework', value):
                    return True
    return False


def load(libraries: Sequence[Sequence[str]]) -> List[str]:
    """Loads each ``(package, path in the package)`` not loaded yet (``tf.load_op_library``).

    Returns one message per library that could not be loaded (the package
    is not installed here, or the library fails to load); each is logged as
    a warning too. A graph that needs its ops then fails as it would have
    (``Op type not registered``); one that does not is unaffected.
    """
    import tensorflow as tf

    failures = []
    for package, rel in libraries:
        key = (str(package), str(rel))
        if key in _loaded_here:
            continue
        try:
            spec = importlib.util.find_spec(key[0])
            dirs = list(spec.submodule_search_locations or []) if spec is not None else []
            path = next(
                (os.path.join(d, key[1]) for d in dirs if os.path.exists(os.path.join(d, key[1]))),
                None,
            )
            if path is None:
                raise FileNotFoundError(f'{key[1]} of package {key[0]!r} is not installed here')
            tf.load_op_library(path)
        except Exception as e:  # noqa: BLE001 - reported, and the graph's own error follows
            msg = f"the driver's op library {key[0]}/{key[1]} was not loaded: {e}"
            log.warning(msg)
            failures.append(msg)
            continue
        _loaded_here[key] = path
    return failures


def expect(libraries: Sequence[Sequence[str]]) -> None:
    """Notes the driver's op libraries, to load when a graph needs an op it does not know."""
    with _lock:
        for package, rel in libraries:
            key = (str(package), str(rel))
            if key not in _loaded_here and key not in _expected:
                _expected.append(key)


def load_expected_for(error: BaseException) -> bool:
    """Loads the expected libraries if `error` is TensorFlow's for an op it does not know
    (``Op type not registered``); True when it did, so that the failed operation can run
    again."""
    with _lock:
        if not _expected or _MISSING_OP not in str(error):
            return False
        todo = list(_expected)
        _expected.clear()
    load(todo)
    return True
