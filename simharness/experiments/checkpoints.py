"""Checkpoints, saved weights, per-round callbacks and TensorBoard scalars of a run.

::

    <run>/checkpoints/ckpt-<rounds done>.npz   server state (the leaves of a tff.learning
                                               process's nested state: weights, optimizer and
                                               aggregator state, noise seeds) + JSON meta
                                               (rounds done, callback state); the last two kept
    <run>/final_weights.npz, best_weights.npz  w0, w1, ... (float arrays)
    <run>/tensorboard/                         one scalar per metric per round

Files are plain ``.npz`` (``allow_pickle=False`` on read: no pickle) written
atomically. Cohorts, DP noise and quantization are pure functions of (seed,
round), so the round number is the whole RNG state: a run resumed from a
checkpoint continues with exactly the bits of an uninterrupted one.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from simharness.errors import SimharnessValueError
from simharness.experiments import atomic
from simharness.validation import check_int

PathLike = Union[str, Path]
CHECKPOINT_DIR = 'checkpoints'
KEEP = 2
_NAME = re.compile(r'^ckpt-(\d+)\.npz$')
_LEAF = 'leaf'


def _flatten(state: Any) -> List[Any]:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.nest.flatten(state)


def _pack(like: Any, leaves: List[np.ndarray], path: PathLike) -> Any:
    """`leaves` in the structure of `like` (a state of the same process)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if like is None:
        raise SimharnessValueError(
            f'{path} holds a nested state: load it with like= a state of '
            'the same process (process.initialize())'
        )
    template = tf.nest.flatten(like)
    if len(template) != len(leaves):
        raise SimharnessValueError(
            f"{path} holds {len(leaves)} state leaves, the process's "
            f'state has {len(template)}: not a checkpoint of this process'
        )
    return tf.nest.pack_sequence_as(like, leaves)


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def save_weights(path: PathLike, weights: Sequence[Any]) -> Path:
    """Writes ``w0, w1, ...`` to an .npz file atomically."""
    return atomic.write_bytes(path, _npz_bytes({f'w{i}': w for i, w in enumerate(weights)}))


def load_weights(path: PathLike) -> List[np.ndarray]:
    """Reads weights written by `save_weights`."""
    with np.load(path, allow_pickle=False) as z:
        n = len([k for k in z.files if re.fullmatch(r'w\d+', k)])
        return [z[f'w{i}'] for i in range(n)]


def save_checkpoint(
    run_dir: PathLike, state: Any, rounds_done: int, meta: Optional[Mapping[str, Any]] = None
) -> Path:
    """Saves the server state after `rounds_done` rounds; keeps the newest `KEEP`.

    `state` is any nested structure of arrays (a ``tff.learning``
    process's state), saved as its leaves in ``tf.nest.flatten`` order
    (`load_checkpoint` packs them into the structure of a state given as
    ``like``).
    """
    d = Path(run_dir) / CHECKPOINT_DIR
    d.mkdir(parents=True, exist_ok=True)
    arrays: Dict[str, Any] = {}
    for i, a in enumerate(_flatten(state)):  # its leaves in order
        arrays[f'{_LEAF}/{i}'] = np.asarray(a)
    arrays['meta'] = np.asarray(
        json.dumps({'rounds_done': int(rounds_done), **(meta or {})}, allow_nan=True)
    )
    path = atomic.write_bytes(d / f'ckpt-{rounds_done:06d}.npz', _npz_bytes(arrays))
    for old in list_checkpoints(run_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: PathLike) -> List[Path]:
    """The run's checkpoints, oldest first."""
    d = Path(run_dir) / CHECKPOINT_DIR
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def load_checkpoint(path: PathLike, like: Any = None) -> Tuple[Any, Dict[str, Any]]:
    """(server state, meta) of a checkpoint file.

    Args:
      path: the checkpoint.
      like: a state of the same structure (``process.initialize()``): the
        leaves are packed into it, each with the dtype of the saved array.

    Raises:
      SimharnessValueError: the file is not a checkpoint (or one of the
        padded-array processes the runner used before tff.learning's, which
        has no leaves),
        or `like` is missing or has another number of leaves (named in the
        message).
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            leaves = sorted(
                (k for k in z.files if k.startswith(_LEAF + '/')),
                key=lambda k: int(k.split('/')[1]),
            )
            if not leaves and 'weights/0' in z.files:
                raise SimharnessValueError(
                    f'{path} is a checkpoint of the padded-array processes that simharness no '
                    'longer has: run again from round 0 (simharness run --restart)'
                )
            meta = json.loads(str(z['meta']))
            arrays = [z[k] for k in leaves]
    except SimharnessValueError:
        raise
    except (OSError, KeyError, ValueError) as e:
        raise SimharnessValueError(f'{path} is not a readable checkpoint: {e}') from e
    return _pack(like, arrays, path), meta


def latest_checkpoint(run_dir: PathLike, like: Any = None) -> Optional[Tuple[Any, Dict[str, Any]]]:
    """The newest readable checkpoint of a run (nested states packed like `like`), or None."""
    for p in reversed(list_checkpoints(run_dir)):
        try:
            return load_checkpoint(p, like)
        except SimharnessValueError:
            continue
    return None


# ------------------------------------------------------------------ callbacks


class Callback:
    """A per-round hook of `run_experiment`.

    ``on_round_end(round_num, row, weights)`` sees the round's metrics row
    (with ``eval_*`` when evaluated) and the new weights; returning True
    stops the run after this round (status 'complete', ``stopped_early``
    in the summary). ``state()`` / ``restore()`` are saved with each
    checkpoint, so that a resumed run continues the callback's counting.
    """

    def on_round_end(
        self, round_num: int, row: Mapping[str, Any], weights: Sequence[np.ndarray]
    ) -> bool:
        del round_num, row, weights
        return False

    def state(self) -> Dict[str, Any]:
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        del state


def _better(mode: str, value: float, best: Optional[float], min_delta: float = 0.0) -> bool:
    if best is None:
        return True
    return value < best - min_delta if mode == 'min' else value > best + min_delta


def _mode_for(metric: str) -> str:
    return 'min' if 'loss' in metric else 'max'


class BestModel(Callback):
    """Keeps the best weights by `metric` (rounds where it is reported) in `path`."""

    def __init__(self, path: PathLike, metric: str = 'eval_loss', mode: Optional[str] = None):
        self.path, self.metric = Path(path), metric
        self.mode = mode or _mode_for(metric)
        self.best: Optional[float] = None
        self.best_round: Optional[int] = None

    def on_round_end(self, round_num, row, weights):
        v = row.get(self.metric)
        if v is not None and not math.isnan(v) and _better(self.mode, v, self.best):
            self.best, self.best_round = float(v), int(round_num)
            save_weights(self.path, weights)
        return False

    def state(self):
        return {'best': self.best, 'best_round': self.best_round}

    def restore(self, state):
        self.best, self.best_round = state.get('best'), state.get('best_round')


class EarlyStopping(Callback):
    """Stops after `patience` reports of `metric` without improvement by `min_delta`."""

    def __init__(
        self,
        metric: str = 'eval_loss',
        patience: int = 3,
        mode: Optional[str] = None,
        min_delta: float = 0.0,
    ):
        patience = check_int('patience', patience, 1)
        self.metric, self.patience, self.min_delta = metric, patience, float(min_delta)
        self.mode = mode or _mode_for(metric)
        self.best: Optional[float] = None
        self.waited = 0

    def on_round_end(self, round_num, row, weights):
        v = row.get(self.metric)
        if v is None or math.isnan(v):
            return False
        if _better(self.mode, v, self.best, self.min_delta):
            self.best, self.waited = float(v), 0
            return False
        self.waited += 1
        return self.waited >= self.patience

    def state(self):
        return {'best': self.best, 'waited': self.waited}

    def restore(self, state):
        self.best, self.waited = state.get('best'), int(state.get('waited', 0))


# ---------------------------------------------------------------- TensorBoard


class ScalarWriter:
    """TensorBoard scalars (``tf.summary.scalar``), one file per run. One owner: close() it."""

    def __init__(self, logdir: PathLike):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        self._tf = tf
        with tf.device('/CPU:0'):
            self._writer = tf.summary.create_file_writer(str(logdir))

    def write(self, step: int, scalars: Mapping[str, Any]) -> None:
        tf = self._tf
        with tf.device('/CPU:0'), self._writer.as_default():
            for tag, v in scalars.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
                    tf.summary.scalar(tag, float(v), step=int(step))
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
