"""Small argument checks shared by the modules that validate user input.

Every check names the argument, the value it got, the value's type and what
was expected, e.g. ``arena_bytes must be an int >= 1, got 0 of type int``.
Wrong types raise `SimharnessTypeError` (a bool is not an int nor a number);
values of the right type out of range raise `SimharnessValueError`.

`SimharnessAttributeError` and `EagerModeError` (in `simharness.errors`) are
re-exported here for the modules that raise them.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple, Union

from simharness.errors import (EagerModeError, SimharnessAttributeError,  # noqa: F401
                               SimharnessError, SimharnessTypeError, SimharnessValueError)


def _got(value: Any) -> str:
    return f'got {value!r} of type {type(value).__name__}'


def _bounds(minimum: Any = None, maximum: Any = None, greater_than: Any = None) -> str:
    if greater_than is not None:
        low = f'> {greater_than}'
        return low if maximum is None else f'{low} and <= {maximum}'
    if minimum is not None and maximum is not None:
        return f'in [{minimum}, {maximum}]'
    if minimum is not None:
        return f'>= {minimum}'
    if maximum is not None:
        return f'<= {maximum}'
    return ''


def _expected(noun: str, bounds: str, allow_none: bool) -> str:
    text = f'{noun} {bounds}' if bounds else noun
    return f'{text} or None' if allow_none else text


def check_int(name: str, value: Any, minimum: Optional[int] = None,
              maximum: Optional[int] = None, *, allow_none: bool = False) -> Any:
    """`value` as an int (None where allowed), or a clear error naming `name`.

    Args:
      name: the argument's name, as the user wrote it.
      value: the value to check.
      minimum: the smallest value allowed (None: no bound).
      maximum: the largest value allowed (None: no bound).
      allow_none: whether None is accepted (and returned).

    Returns:
      ``int(value)``, or None when `value` is None and `allow_none`.

    Raises:
      SimharnessTypeError: `value` is not an integer (bools are not).
      SimharnessValueError: `value` is out of ``[minimum, maximum]``.
    """
    if value is None and allow_none:
        return None
    expected = _expected('an int', _bounds(minimum, maximum), allow_none)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SimharnessTypeError(f'{name} must be {expected}, {_got(value)}',
                                  expected=int, actual=type(value))
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise SimharnessValueError(f'{name} must be {expected}, {_got(value)}')
    return v


def check_number(name: str, value: Any, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, *, greater_than: Optional[float] = None,
                 allow_none: bool = False) -> Any:
    """`value` as a float (None where allowed), or a clear error naming `name`.

    Ints and floats (numpy's too) are numbers; bools are not. NaN is never
    accepted; infinity is where the bounds allow it.

    Args:
      name: the argument's name.
      value: the value to check.
      minimum: the smallest value allowed (None: no bound).
      maximum: the largest value allowed (None: no bound).
      greater_than: a bound the value must exceed (instead of `minimum`).
      allow_none: whether None is accepted (and returned).

    Returns:
      ``float(value)``, or None when `value` is None and `allow_none`.

    Raises:
      SimharnessTypeError: `value` is not a real number.
      SimharnessValueError: `value` is NaN or out of bounds.
    """
    if value is None and allow_none:
        return None
    expected = _expected('a number', _bounds(minimum, maximum, greater_than), allow_none)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SimharnessTypeError(f'{name} must be {expected}, {_got(value)}',
                                  expected=float, actual=type(value))
    v = float(value)
    if (math.isnan(v) or (minimum is not None and v < minimum)
            or (greater_than is not None and v <= greater_than)
            or (maximum is not None and v > maximum)):
        raise SimharnessValueError(f'{name} must be {expected}, {_got(value)}')
    return v


def check_bool(name: str, value: Any) -> bool:
    """`value` if it is a bool, else a `SimharnessTypeError` naming `name`.

    Ints (0, 1) and strings ('false') are refused: they are common mistakes
    that Python's truthiness would silently accept.
    """
    if not isinstance(value, bool):
        raise SimharnessTypeError(f'{name} must be a bool (True or False), {_got(value)}',
                                  expected=bool, actual=type(value))
    return value


def check_instance(name: str, value: Any, cls: Union[type, Tuple[type, ...]],
                   expected: str) -> Any:
    """`value` if it is an instance of `cls`, else a `SimharnessTypeError` naming `name`.

    Args:
      name: the argument's name.
      value: the value to check.
      cls: the class (or classes) accepted.
      expected: what was expected, in words (``'an Executor'``).
    """
    if not isinstance(value, cls):
        raise SimharnessTypeError(f'{name} must be {expected}, {_got(value)}',
                                  expected=cls, actual=type(value))
    return value


def check_callable(name: str, value: Any, expected: str) -> Any:
    """`value` if it is callable (a class too), else a `SimharnessTypeError` naming `name`."""
    if not callable(value):
        raise SimharnessTypeError(f'{name} must be {expected}, {_got(value)}',
                                  expected='callable', actual=type(value))
    return value


def check_type_spec_matches(type_spec: Any, actual: Any, what: str) -> None:
    """Raises unless an explicit `type_spec` can hold a value of type `actual` (TFF's rule).

    Args:
      type_spec: the type the caller gave (anything `to_type` takes), or None.
      actual: the value's own type (a `simharness.core.types.Type`).
      what: the value, in words (``'computation'``, ``'intrinsic federated_sum'``).

    Raises:
      SimharnessTypeError: `actual` is not assignable to `type_spec`.
    """
    if type_spec is None:
        return
    from simharness.core import types as T  # local: types imports this module
    t = T.to_type(type_spec)
    if not t.is_assignable_from(actual):
        raise SimharnessTypeError(
            f'the {what} of type {actual} is not assignable to the type_spec {t} given '
            f'with it', expected=t, actual=actual)


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
    import numpy as np  # local: this module stays free of heavy imports

    def refuse(reason: str) -> SimharnessTypeError:
        return SimharnessTypeError(
            f'{what} {value!r} of type {type(value).__name__} does not fit the expected type '
            f'{type_spec}: {reason}', expected=type_spec, actual=type(value))

    want = np.dtype(type_spec.dtype)
    try:
        a = np.asarray(value)
    except (ValueError, OverflowError) as e:  # a ragged nested list
        raise refuse(f'it is not an array ({e})') from None
    is_text = a.dtype.kind in 'US' or (a.dtype.kind == 'O' and a.size > 0 and all(
        isinstance(x, (str, bytes)) for x in a.reshape(-1)))
    if want == np.dtype(object):  # a string tensor
        if not (is_text or (a.dtype.kind == 'O' and a.size == 0)):
            raise refuse('expected a str or bytes')
        out = a
    else:
        if is_text or a.dtype.kind == 'O':
            reason = ('an int outside int64' if a.dtype.kind == 'O' and not is_text
                      else 'a string is not a number')
            raise refuse(f'{reason}; expected a value of dtype {want.name}')
        if a.dtype.kind in 'iu' and want.kind in 'iu':
            info = np.iinfo(want)
            if a.size and (a.min() < info.min or a.max() > info.max):
                raise refuse(f'outside the range [{info.min}, {info.max}] of {want.name}')
        elif not np.can_cast(a.dtype, want, 'same_kind'):
            raise refuse(f'a {a.dtype.name} value would be truncated or changed in '
                         f'{want.name}; convert it explicitly')
        with np.errstate(over='ignore', invalid='ignore'):
            out = a.astype(want)
        if want.kind in 'fc' and a.dtype.kind in 'fc' and np.any(
                np.isfinite(a) & ~np.isfinite(out)):
            raise refuse(f'it overflows {want.name}')
    shape = type_spec.shape
    if shape is not None and (len(shape) != a.ndim or any(
            d is not None and d != s for d, s in zip(shape, a.shape))):
        raise refuse(f'its shape {list(a.shape)} is not {list(shape)}')
    return out
