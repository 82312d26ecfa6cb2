"""Field metadata of :class:`~dltop.profiles.jobspec.JobSpec`: checks and declarations,
and what is read off them for any such dataclass (:func:`check_declarations`,
:func:`json_decoders`).

A ``JobSpec`` field declares, in one place, everything derived from it:

- ``setting(default, check)``: a profile key (``[defaults]`` or ``[[matrix]]``)
  with its default and its check; the loader's keys, defaults and validation
  are read off these fields.
- ``column=True`` (or a function returning several columns): the field is
  stored in the ``jobs`` table under its name (see ``JobSpec.columns``).
- ``codec=(to_json, from_json)``: how a field that is not a plain ``int``,
  ``float``, ``str`` or optional one goes to and from the runner's spec.json.
- ``identity``: whether the field is part of the configuration's identity
  (``JobSpec.identity``, ``JobSpec.config_key``): runs whose jobs differ in an
  identity field are different configurations, never repeats of one. ``True``,
  ``False``, or a function giving the field's JSON value in the identity. Every
  field must declare it (``jobspec.py`` checks at import), so a new field cannot
  be forgotten: settings that change what is measured say ``True``; budgets and
  schedule (timeouts, retries, cool-down, the repeat index) say ``False``.
- ``quiet`` (identity settings must declare it, ``jobspec.py`` checks at import): the
  values a results caption leaves unstated while every configuration has one of
  them (``True``: the default, ``0`` and ``0.0`` alike; a tuple: those values;
  ``False``: always stated). Settings added after tables were first published are
  quiet, so an older table's caption reads as it did.
- ``header``: the field's column header in results tables when its name with spaces
  is not the right one (a unit: ``min time (s)``).
- ``row_key``: a row key of every summary and comparison table, varying or not
  (``precision``), instead of only when it varies.
- the lists a setting is in, read off with :func:`declaring`: ``sweep`` (a profile may
  give a list, each value a configuration; the place of its axis, the first slowest),
  ``group`` (``window``, ``lm``: the transformers', ``pytorch``, ``serve``), ``order`` (its
  place among the settings results show first), ``short`` and ``last`` (a run label's
  form, ``"{} it"``, and whether it comes after the configuration's fields), ``shown``
  (``dltop profiles show`` has a column for it, or leaves it out), ``modes`` (the only
  modes it applies to: ``prompt_tokens`` and ``new_tokens``'s ``generate``, ``serve``).

A check takes the raw TOML value and returns the validated value, or raises
:class:`ValueError` with a message; the loader prefixes the file and the key. A
numeric setting's check is an :class:`Integer` or a :class:`Number`, which carry
their range (:func:`bounds`; the limits are :mod:`dltop.profiles.limits`): every
int or float setting must have one (:func:`check_declarations`), so none can take a
NaN, an infinity or an absurd value.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, Generic, TypeVar, cast, get_args, get_type_hints

from dltop.profiles.limits import MAX_LABEL, MAX_TIMEOUT_S

T = TypeVar("T")
Check = Callable[[Any], T]
"""Validate a raw profile value: return it normalised, or raise ValueError(message)."""
Columns = Callable[[Any], Mapping[str, Any]]

CHECK = "check"
KEY = "key"
COLUMN = "column"
CODEC = "codec"
IDENTITY = "identity"
QUIET = "quiet"
HEADER = "header"
ROW_KEY = "row_key"
SWEEP = "sweep"
GROUP = "group"
ORDER = "order"
SHORT = "short"
LAST = "last"
SHOWN = "shown"
MODES = "modes"
Quiet = bool | tuple[Any, ...]
"""``True`` (its default), ``False`` (always stated) or the quiet values themselves."""
Identity = bool | Callable[[Any], Any]
"""``True``/``False``, or the field's value → its JSON value in the identity."""


def setting(default: T, check: Check[T], *, identity: Identity,
            column: bool | Columns = False, key: str | None = None,
            quiet: Quiet | None = None, header: str | None = None,
            row_key: bool = False, sweep: int | None = None, group: str | None = None,
            order: int | None = None, short: str | None = None, last: bool = False,
            shown: bool = False, modes: tuple[str, ...] | None = None,
            codec: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None) -> T:
    """A JobSpec field that is also a profile setting with ``default``.

    Args:
        default: the value when neither the entry nor ``[defaults]`` sets it.
        check: validates the profile's value (see the module docstring).
        identity: part of the configuration's identity (see the module docstring);
            no default, so every setting decides.
        column: store the field in the ``jobs`` table under its name.
        key: the profile key when it cannot be the field's name (``profile = true``
            names the field ``op_profile``: ``JobSpec.profile`` is the profile's name).
        quiet: for an identity setting, required: the values a caption leaves unstated
            (see the module docstring).
        header: its results column header (default: the name, ``_`` as spaces).
        row_key: a row key of every summary and comparison table.
        sweep, group, order, short, last, shown, modes: the lists it is in (see the module
            docstring).
        codec: (to JSON, from JSON) where the type has no derived decoder.
    """
    out: T = field(default=default, metadata={
        CHECK: check, COLUMN: column, IDENTITY: identity, KEY: key, QUIET: quiet,
        HEADER: header, ROW_KEY: row_key, SWEEP: sweep, GROUP: group, ORDER: order,
        SHORT: short, LAST: last, SHOWN: shown, MODES: modes, CODEC: codec})
    return out


def _show(x: float) -> str:
    """A bound as written in messages and docs: ``1000000``, ``0.5``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def given(v: Any) -> str:
    """A profile's value as its TOML spells it in an error: ``true``, not Python's ``True``
    (strings and numbers as ``repr`` writes them: ``'gpu:0'``, ``1.5``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(given(x) for x in v) + "]"
    return repr(v)


ONE_VALUE = "this key takes one value, not a sweep (write one [[matrix]] entry per value)"
"""Why a list is refused where a key does not sweep."""


def _not_a_sweep(v: Any) -> str:
    """The end of an error about ``v``: why, when ``v`` is a list (a sweep of a key that
    takes one value)."""
    return f": {ONE_VALUE}" if isinstance(v, list) else ""


@dataclass(frozen=True)
class Integer:
    """An integer (not a bool) from ``minimum`` to ``maximum``, or one of the words ``also``."""

    minimum: int
    maximum: int
    also: tuple[str, ...] = ()

    @property
    def expected(self) -> str:
        """What the check accepts, as its error says it."""
        words = "".join(f' or "{w}"' for w in self.also)
        return f"an integer >= {self.minimum} and <= {self.maximum}{words}"

    def __call__(self, v: Any) -> Any:
        if isinstance(v, str) and v in self.also:
            return v
        if isinstance(v, bool) or not isinstance(v, int) \
                or not self.minimum <= v <= self.maximum:
            raise ValueError(f"expected {self.expected}, got {given(v)}{_not_a_sweep(v)}")
        return v


@dataclass(frozen=True)
class Number:
    """A finite number (an integer or a float, not a bool) from ``low`` (excluded when
    ``above``) to ``high`` (excluded when ``below``); returned as float."""

    low: float
    high: float
    above: bool = False
    noun: str = "number"
    below: bool = False

    @property
    def expected(self) -> str:
        """The range, as its error says it (``> 0 and <= 1000``)."""
        return f"{'>' if self.above else '>='} {_show(self.low)} and " \
               f"{'<' if self.below else '<='} {_show(self.high)}"

    def __call__(self, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"expected a {self.noun} {self.expected}, got {given(v)}"
                             f"{_not_a_sweep(v)}")
        # NaN fails every comparison: the range test refuses it with infinities
        low_ok = v > self.low if self.above else v >= self.low
        high_ok = v < self.high if self.below else v <= self.high
        if not (math.isfinite(v) and low_ok and high_ok):
            raise ValueError(f"expected a finite {self.noun} {self.expected}, got {given(v)}")
        return float(v)


@dataclass(frozen=True)
class NumberOr(Number):
    """A :class:`Number`, or one of the words ``also`` (``request_rate = "inf"``)."""

    also: tuple[str, ...] = ()

    @property
    def expected(self) -> str:
        """The range and the words, as its error says it."""
        return super().expected + "".join(f' or "{w}"' for w in self.also)

    def __call__(self, v: Any) -> Any:
        if isinstance(v, str) and v in self.also:
            return v
        try:
            return super().__call__(v)
        except ValueError:
            raise ValueError(f"expected a finite {self.noun} {self.expected}, "
                             f"got {given(v)}{_not_a_sweep(v)}") from None


def integer(minimum: int, maximum: int) -> Integer:
    """An integer (not a bool) from ``minimum`` to ``maximum``."""
    return Integer(minimum, maximum)


def number(*, positive: bool, maximum: float) -> Number:
    """A finite number, ``> 0`` when ``positive`` else ``>= 0``, at most ``maximum``;
    returned as float."""
    return Number(0.0, maximum, above=positive)


def one_of(valid: tuple[str, ...]) -> Check[str]:
    """One of ``valid``; the error suggests the closest."""
    def check(v: Any) -> str:
        if isinstance(v, list):
            raise ValueError(f"expected one of {', '.join(valid)}, got {given(v)}"
                             f"{_not_a_sweep(v)}")
        if v not in valid:
            close = difflib.get_close_matches(str(v), valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown value {given(v)}{hint} (valid: {', '.join(valid)})")
        return str(v)
    return check


def boolean(v: Any) -> bool:
    """``true`` or ``false``."""
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {given(v)}{_not_a_sweep(v)}")
    return v


fraction = Number(0.0, 1.0, above=True)
"""A number in (0, 1]."""


seconds = Number(0.0, MAX_TIMEOUT_S, noun="number of seconds")
"""A time window (:mod:`dltop.profiles.window`): 0 (none) to the longest ``timeout_s``."""


def every(maximum: int) -> Integer:
    """An iteration count from 1 to ``maximum``, or ``"epoch"``."""
    return Integer(1, maximum, also=("epoch",))


def label(v: Any) -> str:
    """A user's label (a profile's name, a command's model): a string of at most
    ``MAX_LABEL`` characters, which every table and title can show."""
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {given(v)}")
    if len(v) > MAX_LABEL:
        raise ValueError(f"expected at most {MAX_LABEL} characters, got {len(v)}")
    return v


def string(v: Any) -> str:
    """Any string."""
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {given(v)}")
    return v


def path(v: Any) -> str:
    """A path string (expanded later, where it is used)."""
    if not isinstance(v, str):
        raise ValueError("expected a path string")
    return v


@dataclass(frozen=True)
class Maybe(Generic[T]):
    """``None`` (the key absent) or a value ``inner`` accepts."""

    inner: Check[T]

    def __call__(self, v: Any) -> T | None:
        return None if v is None else self.inner(v)


def optional(check: Check[T]) -> Maybe[T]:
    """``None`` (the key absent) or a value ``check`` accepts."""
    return Maybe(check)


def bounds(check: Any) -> Integer | Number | None:
    """The range a setting's check enforces (through :func:`optional`), or None."""
    while isinstance(check, Maybe):
        check = check.inner
    return check if isinstance(check, Integer | Number) else None


def quiet_values(fs: Iterable[Field[Any]]) -> dict[str, tuple[Any, ...]]:
    """Field name -> the values a results caption leaves unstated (``quiet``), for the
    fields that declare some; a float default counts as its integer too (``0``, ``0.0``)."""
    out: dict[str, tuple[Any, ...]] = {}
    for f in fs:
        quiet = f.metadata.get(QUIET)
        if quiet is True:
            d = f.default
            out[f.name] = (int(d), d) if isinstance(d, float) and d.is_integer() else (d,)
        elif isinstance(quiet, tuple):
            out[f.name] = quiet
    return out


def headers(fs: Iterable[Field[Any]]) -> dict[str, str]:
    """Field name -> its results column header, for the fields that declare one."""
    return {f.name: str(f.metadata[HEADER]) for f in fs if f.metadata.get(HEADER)}


def declaring(fs: Iterable[Field[Any]], what: str, value: Any = None) -> tuple[str, ...]:
    """The fields that declare ``what`` (equal to ``value`` when given), in declaration
    order, or by their place where ``what`` is one (``sweep``, ``order``)."""
    got = [(f, f.metadata.get(what)) for f in fs]
    # `is`, not `in`: a place 0 is declared, and 0 == False
    hits = [f for f, v in got if (v == value if value is not None
                                  else not (v is None or v is False))]
    hits.sort(key=lambda f: int(f.metadata[what]) if what in (SWEEP, ORDER) else 0)
    return tuple(f.name for f in hits)


def undeclared(fs: Iterable[Field[Any]]) -> list[str]:
    """Identity settings that do not say whether a caption states them (``quiet``)."""
    return [f.name for f in fs if CHECK in f.metadata and f.metadata.get(IDENTITY) is not False
            and f.metadata.get(QUIET) is None]


def check_declarations(cls: type[Any]) -> None:
    """Fail at import when a field of ``cls`` leaves out a declaration results rely on.

    Raises:
        TypeError: a field does not declare ``identity``, an identity setting does not
            declare ``quiet``, or a numeric setting's check has no range: a programming
            error, caught by any import.
    """
    missing = [f.name for f in fields(cls) if IDENTITY not in f.metadata]
    if missing:
        raise TypeError(f"{cls.__name__} fields {missing} do not declare identity "
                        "(fields.IDENTITY)")
    unquiet = undeclared(fields(cls))
    if unquiet:
        raise TypeError(f"{cls.__name__} identity settings {unquiet} do not declare quiet= "
                        "(whether a results caption states their default)")
    hints = get_type_hints(cls)
    unbounded = [f.name for f in fields(cls) if CHECK in f.metadata
                 and set(get_args(hints[f.name]) or (hints[f.name],)) & {int, float}
                 and bounds(f.metadata[CHECK]) is None]
    if unbounded:
        raise TypeError(f"{cls.__name__} numeric settings {unbounded} have no range "
                        "(check with fields.Integer or fields.Number)")


def json_decoders(cls: type[Any]) -> dict[str, Callable[[Any], Any]]:
    """How each field of the dataclass ``cls`` is read back from JSON, by name: its
    codec's decoder, or one derived from its type (``int``, ``float``, ``str``,
    ``bool``, ``int | str | None`` as is, and any of them optional).

    Raises:
        TypeError: a field of another type has no codec.
    """
    hints = get_type_hints(cls)
    return {f.name: _decoder(cls.__name__, f, hints[f.name]) for f in fields(cls)}


def _decoder(owner: str, f: Field[Any], hint: Any) -> Callable[[Any], Any]:
    codec = f.metadata.get(CODEC)
    if codec:
        return cast(Callable[[Any], Any], codec[1])
    if hint in (int, float, str, bool):
        return cast(Callable[[Any], Any], hint)
    args = get_args(hint)
    if len(args) > 2 and set(args) <= {int, str, type(None)}:  # eval_every: N or "epoch"
        return lambda v: v
    if len(args) == 2 and type(None) in args:
        inner = _decoder(owner, f, next(a for a in args if a is not type(None)))
        return lambda v: None if v is None else inner(v)
    raise TypeError(f"{owner}.{f.name}: no JSON decoder for {hint!r}; give it a codec")
