"""Small argument checks shared by the modules that validate user input.

Every check names the argument, the value it got, the value's type and what
was expected, e.g. ``arena_bytes must be an int >= 1, got 0 of type int``.
Wrong types raise `SimharnessTypeError` (a bool is not an int nor a number);
values of the right type out of range raise `SimharnessValueError`.

`EagerModeError` (in `simharness.errors`) is re-exported here for the
executor that raises it.

Layering: this module sits above `simharness.core` (it checks type specs with
`core.types`), so core never imports it; core's own value-vs-type rules
(`check_constant`, `array_refusal`) live in `core.value_rules`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple, Union

from simharness.core import types as T
from simharness.errors import EagerModeError, SimharnessTypeError, SimharnessValueError

__all__ = [
    'EagerModeError',
    'check_bool',
    'check_callable',
    'check_instance',
    'check_int',
    'check_number',
    'check_type_spec_matches',
]


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


def check_int(
    name: str,
    value: Any,
    minimum: Optional[int] = None,
    maximum: Optional[int] = None,
    *,
    allow_none: bool = False,
) -> Any:
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
        raise SimharnessTypeError(
            f'{name} must be {expected}, {_got(value)}', expected=int, actual=type(value)
        )
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise SimharnessValueError(f'{name} must be {expected}, {_got(value)}')
    return v


def check_number(
    name: str,
    value: Any,
    minimum: Optional[float] = None,
    maximum: Optional[float] = None,
    *,
    greater_than: Optional[float] = None,
    allow_none: bool = False,
) -> Any:
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
        raise SimharnessTypeError(
            f'{name} must be {expected}, {_got(value)}', expected=float, actual=type(value)
        )
    v = float(value)
    if (
        math.isnan(v)
        or (minimum is not None and v < minimum)
        or (greater_than is not None and v <= greater_than)
        or (maximum is not None and v > maximum)
    ):
        raise SimharnessValueError(f'{name} must be {expected}, {_got(value)}')
    return v


def check_bool(name: str, value: Any) -> bool:
    """`value` if it is a bool, else a `SimharnessTypeError` naming `name`.

    Ints (0, 1) and strings ('false') are refused: they are common mistakes
    that Python's truthiness would silently accept.
    """
    if not isinstance(value, bool):
        raise SimharnessTypeError(
            f'{name} must be a bool (True or False), {_got(value)}',
            expected=bool,
            actual=type(value),
        )
    return value


def check_instance(name: str, value: Any, cls: Union[type, Tuple[type, ...]], expected: str) -> Any:
    """`value` if it is an instance of `cls`, else a `SimharnessTypeError` naming `name`.

    Args:
      name: the argument's name.
      value: the value to check.
      cls: the class (or classes) accepted.
      expected: what was expected, in words (``'an Executor'``).
    """
    if not isinstance(value, cls):
        raise SimharnessTypeError(
            f'{name} must be {expected}, {_got(value)}', expected=cls, actual=type(value)
        )
    return value


def check_callable(name: str, value: Any, expected: str) -> Any:
    """`value` if it is callable (a class too), else a `SimharnessTypeError` naming `name`."""
    if not callable(value):
        raise SimharnessTypeError(
            f'{name} must be {expected}, {_got(value)}', expected='callable', actual=type(value)
        )
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
    t = T.to_type(type_spec)
    if not t.is_assignable_from(actual):
        raise SimharnessTypeError(
            f'the {what} of type {actual} is not assignable to the type_spec {t} given with it',
            expected=t,
            actual=actual,
        )
