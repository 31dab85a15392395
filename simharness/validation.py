"""Small argument checks shared by the modules that validate user input."""

from __future__ import annotations

import numbers
from typing import Any

from simharness.errors import SimharnessTypeError, SimharnessValueError


def check_int(name: str, value: Any, minimum: int) -> int:
    """`value` as an int, or a clear error naming `name`.

    Raises:
      SimharnessTypeError: `value` is not an integer (bools are not).
      SimharnessValueError: `value` is below `minimum`.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SimharnessTypeError(
            f'{name} must be an int, got {value!r} of type {type(value).__name__}',
            expected=int, actual=type(value))
    if value < minimum:
        raise SimharnessValueError(f'{name} must be >= {minimum}, got {value}')
    return int(value)
