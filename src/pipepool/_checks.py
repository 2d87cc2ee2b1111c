"""The rules an argument is checked by, where it is given: one rule per kind of value.

Every face (LocalExecutor, RecordExecutor, ProcessPoolExecutor and its ``with_options``,
ClusterExecutor, and the joblib and Airflow adapters where they pass a value on) checks
a parameter by the rule of its kind, so one mistake gets one error on every face: a
``TypeError`` for the wrong type, a ``ValueError`` for a wrong value, each naming the
argument, saying what it takes and what it got. Checked at the call, not rounds later in
a worker or in the caller's loop, where the error would name neither.

The kinds:

* a *count* (workers, a depth, tasks per child, bytes): an integer (``int``, or any
  ``numbers.Integral`` such as a numpy integer) at least a minimum, or None where None
  means something;
* *seconds* (a duration, a grace period, a timeout): a finite real (``int``, ``float``,
  ``Fraction``, a numpy float) at least 0, or above 0 where 0 means nothing (a task's
  timeout), or None where None means "no limit";
* a *ratio* (Dask's worker saturation): a real above 0, ``inf`` for no limit;
* a *callable* (a task's function, an initializer);
* *keywords* (a call's ``kwargs``): a mapping whose keys are strings, or None;
* *positionals* (a call's ``args``, an initializer's ``initargs``): a tuple, a list or
  another sequence, never a string (``args="ab"`` would be two arguments);
* a *choice* (a start method, a loop): one of a few strings, or None;
* *module names* (``preload``): an iterable of non-empty strings, never a string itself.

``bool`` is neither a count nor a number of seconds: ``True`` is 1 to Python, never to a
user who wrote it. Where the standard library refuses a value itself and its tests match
the words (``ProcessPoolExecutor``'s ``max_workers``, ``map``'s ``buffersize``), the
message starts with its words (``says``).

The hot paths (``queue``, ``queue_call``, ``submit``, ``sync``) test the common case
inline (``type(args) is tuple``) and call in here only for the rest.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60  # enough to recognise a value, never a page of it


def _got(value: object) -> str:
    """The value as an error shows it: short, with its type where that helps."""
    shown = _REPR.repr(value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return shown
    return f"{shown} (a {type(value).__name__})"


def count(
    value: Any,
    name: str,
    *,
    minimum: int = 1,
    none: bool = False,
    says: tuple[str | None, str | None] = (None, None),
) -> Any:
    """``value`` as an ``int`` if it is an integer (not bool) >= ``minimum``, or None if
    ``none`` allows it; else a TypeError or ValueError naming ``name``. ``says``: the
    standard library's own words for either error, where it has them."""
    if value is None and none:
        return None
    accepted = f"{name} must be an integer >= {minimum}" + (" or None" if none else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{says[0] or accepted}, got {_got(value)}")
    number = int(value)
    if number < minimum:
        raise ValueError(f"{says[1] or accepted}, got {_got(value)}")
    return number


def seconds(value: Any, name: str, *, positive: bool = False, none: bool = False) -> Any:
    """``value`` as a ``float`` if it is a finite real (not bool) >= 0 (> 0 if
    ``positive``), or None if ``none`` allows it; else a TypeError or ValueError naming
    ``name``."""
    if value is None and none:
        return None
    accepted = f"a finite number of seconds {'> 0' if positive else '>= 0'}"
    accepted += " or None" if none else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {accepted}, got {_got(value)}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValueError(f"{name} must be {accepted}, got {_got(value)}")
    return number


def ratio(value: Any, name: str) -> Any:
    """``value`` as a ``float`` if it is a real (not bool) > 0, ``inf`` included (a
    ratio with no limit); else a TypeError or ValueError naming ``name``."""
    accepted = f"{name} must be a number > 0 (float('inf') for no limit)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{accepted}, got {_got(value)}")
    number = float(value)
    if not number > 0:  # (NaN too)
        raise ValueError(f"{accepted}, got {_got(value)}")
    return number


def function(value: Any, name: str, *, none: bool = False) -> Any:
    """``value`` if it is callable (or None, if ``none`` allows it); else a TypeError
    naming ``name``."""
    if callable(value) or (value is None and none):
        return value
    raise TypeError(f"{name} must be a callable{' or None' if none else ''}, got {_got(value)}")


def keywords(value: Any, name: str = "kwargs") -> dict[str, Any]:
    """``value`` as a dict of keyword arguments (None: empty; a dict: itself; another
    mapping: copied) if it is a mapping whose keys are strings; else a TypeError naming
    ``name``: the call would fail in the worker, far from the mistake."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a mapping of keyword arguments (a dict) or None, got {_got(value)}"
        )
    bad = next((k for k in value if not isinstance(k, str)), None)
    if bad is not None:
        raise TypeError(f"{name} must have strings as keys (argument names), got key {_got(bad)}")
    return value if type(value) is dict else dict(value)


def positionals(value: Any, name: str = "args") -> tuple[Any, ...]:
    """``value`` as a tuple of positional arguments if it is a tuple, a list or another
    sequence but a string; else a TypeError naming ``name``."""
    if type(value) is tuple:
        return value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return tuple(value)
    raise TypeError(f"{name} must be a tuple (or list) of positional arguments, got {_got(value)}")


def choice(value: Any, name: str, options: Sequence[str], *, none: bool = True) -> Any:
    """``value`` if it is one of ``options`` (or None, if ``none`` allows it); else a
    TypeError (not a string) or ValueError (another string) naming ``name``."""
    if value is None and none:
        return None
    accepted = ", ".join(map(repr, options)) + (" or None" if none else "")
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {accepted}, got {_got(value)}")
    if value not in options:
        raise ValueError(f"{name} must be one of {accepted}, got {_got(value)}")
    return value


def hashable(value: Any, name: str = "key") -> None:
    """Nothing if ``value`` can be hashed (a dict key); else a TypeError naming ``name``."""
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{name} must be hashable, got {_got(value)}") from None


def module_names(value: Any, name: str) -> tuple[str, ...]:
    """``value`` as a tuple of module names if it is an iterable of non-empty strings
    (a lone string is not: its letters are not modules); else a TypeError naming
    ``name``."""
    accepted = f"{name} must be an iterable of module names (non-empty str)"
    if isinstance(value, str | bytes):
        raise TypeError(f"{accepted}, not a single string: got {_got(value)}")
    try:
        names = tuple(value)
    except TypeError:
        raise TypeError(f"{accepted}, got {_got(value)}") from None
    for item in names:
        if not isinstance(item, str) or not item:
            raise TypeError(f"{accepted}, got {_got(item)} in it")
    return names
