"""Which values a tensor type takes: the rules shared by constants and client values.

No silent truncation, wrapping or parsing, as in TFF: `check_constant` turns a
Python or numpy constant into an array of a tensor type or refuses it;
`array_refusal`, `check_array` and `shape_refusal` are the one rule for client
values (lossy dtypes, integers out of range, shapes the type does not allow).

The rules read a tensor type's `dtype` and `shape` only (`TensorLike`), so this
module imports nothing of `simharness.core.types`, which exports these functions
with the types.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence, Tuple

import numpy as np

from simharness.errors import SimharnessTypeError, SimharnessValueError

__all__ = ['TensorLike', 'check_constant', 'array_refusal', 'check_array', 'shape_refusal']


class TensorLike(Protocol):
    """What the rules read of a tensor type (`simharness.core.types.TensorType`)."""

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def shape(self) -> Optional[Tuple[Optional[int], ...]]: ...


def check_constant(value: Any, type_spec: Any, what: str = 'constant') -> Any:
    """`value` as a numpy array of the tensor type `type_spec`, or a `SimharnessTypeError`.

    TFF refuses a constant whose type is not assignable to the parameter's;
    here, as there, nothing is silently truncated, wrapped or parsed: a float
    for an integer type, an int out of the integer type's range, a finite
    float that overflows to infinity, a string for a number (or a number for
    a string) and a shape that does not match are refused. Ints are accepted
    for float types and bools for numbers (exact conversions).

    Args:
      value: a Python or numpy constant (or a nested list of them).
      type_spec: the expected `TensorType`.
      what: the value, in words, for the message.

    Returns:
      a numpy array of ``type_spec.dtype`` (an object array of str/bytes for
      a string type).

    Raises:
      SimharnessTypeError: `value` does not fit `type_spec`.
    """

    def refuse(reason: str) -> SimharnessTypeError:
        return SimharnessTypeError(
            f'{what} {value!r} of type {type(value).__name__} does not fit the expected type '
            f'{type_spec}: {reason}',
            expected=type_spec,
            actual=type(value),
        )

    want = np.dtype(type_spec.dtype)
    try:
        a = np.asarray(value)
    except (ValueError, OverflowError) as e:  # a ragged nested list
        raise refuse(f'it is not an array ({e})') from None
    is_text = a.dtype.kind in 'US' or (
        a.dtype.kind == 'O'
        and a.size > 0
        and all(isinstance(x, (str, bytes)) for x in a.reshape(-1))
    )
    if want == np.dtype(object):  # a string tensor
        if not (is_text or (a.dtype.kind == 'O' and a.size == 0)):
            raise refuse('expected a str or bytes')
        out = a
    else:
        if is_text or a.dtype.kind == 'O':
            reason = (
                'an int outside int64'
                if a.dtype.kind == 'O' and not is_text
                else 'a string is not a number'
            )
            raise refuse(f'{reason}; expected a value of dtype {want.name}')
        if a.dtype.kind in 'iu' and want.kind in 'iu':
            info = np.iinfo(want)
            if a.size and (a.min() < info.min or a.max() > info.max):
                raise refuse(f'outside the range [{info.min}, {info.max}] of {want.name}')
        elif not np.can_cast(a.dtype, want, 'same_kind'):
            raise refuse(
                f'a {a.dtype.name} value would be truncated or changed in '
                f'{want.name}; convert it explicitly'
            )
        with np.errstate(over='ignore', invalid='ignore'):
            out = a.astype(want)
        if (
            want.kind in 'fc'
            and a.dtype.kind in 'fc'
            and np.any(np.isfinite(a) & ~np.isfinite(out))
        ):
            raise refuse(f'it overflows {want.name}')
    shape = type_spec.shape
    if shape is not None and (
        len(shape) != a.ndim or any(d is not None and d != s for d, s in zip(shape, a.shape))
    ):
        raise refuse(f'its shape {list(a.shape)} is not {list(shape)}')
    return out


def array_refusal(arr: np.ndarray, t: TensorLike, *, batched: bool = False) -> Optional[str]:
    """Why the numeric array `arr` is not exactly a value of tensor type `t` (None: it is).

    The rule for client values (no silent truncation, as in TFF): a float
    array for an integer type, a bool array for a non-bool type or the
    reverse (unless empty), integers outside the range of `t`'s integer
    dtype, and a shape `t` does not allow are refused; ints for floats are
    exact and accepted. Strings and objects are the caller's to refuse.

    Args:
      arr: the value as a numpy array.
      t: the tensor type it should have.
      batched: `arr` holds many values along its first axis (one per client).

    Returns:
      None, or the reason, in words that complete "value ... is refused: ".
    """
    found = _array_refusal(arr, t, batched)
    return None if found is None else found[1]


def check_array(arr: np.ndarray, t: TensorLike, what: object) -> None:
    """Raises unless the numeric array `arr` is exactly a value of `t` (the rule of `array_refusal`).

    Raises:
      SimharnessTypeError: a lossy dtype (float for int, bool for non-bool or
        the reverse) or a shape `t` does not allow.
      SimharnessValueError: integers outside the range of `t`'s dtype.
    """
    found = _array_refusal(arr, t, False)
    if found is None:
        return
    out_of_range, reason = found
    message = f'value {what!r:.80} is refused: {reason}'
    if out_of_range:
        raise SimharnessValueError(message)
    raise SimharnessTypeError(message, expected=t, actual=f'{arr.dtype}{list(arr.shape)}')


def shape_refusal(shape: Sequence[int], t: TensorLike) -> Optional[str]:
    """Why a value of `shape` is not of tensor type `t` (None: its shape is allowed)."""
    if t.shape is not None and (
        len(shape) != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, shape))
    ):
        return f'a value of shape {tuple(shape)} is not assignable to {t}'
    return None


def _array_refusal(arr: np.ndarray, t: TensorLike, batched: bool) -> Optional[Tuple[bool, str]]:
    """(out of range?, reason) for an array `array_refusal` refuses; None otherwise."""
    if (np.issubdtype(arr.dtype, np.floating) and np.issubdtype(t.dtype, np.integer)) or (
        (arr.dtype == np.bool_) != (t.dtype == np.bool_) and arr.size
    ):
        return False, f'a value of dtype {arr.dtype} is not assignable to {t}'
    if arr.dtype.kind in 'iu' and t.dtype.kind in 'iu' and arr.size:
        info = np.iinfo(t.dtype)
        if int(arr.min()) < info.min or int(arr.max()) > info.max:
            return True, f'out of the range [{info.min}, {info.max}] of {t}'
    reason = shape_refusal(arr.shape[1:] if batched else arr.shape, t)
    return None if reason is None else (False, reason)
