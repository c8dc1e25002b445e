"""Exact conversion of JSON number text in microseconds to integer nanoseconds.

Kineto writes timestamps as epoch microseconds, sometimes with a fractional part
(`1712195495519689.047`). Through float64 such a value loses its nanoseconds: above 2**50 the
spacing of doubles is 0.25 us. So the digits are read as text, all numbers of a batch at once,
with numpy: every digit contributes `digit * 10**k` nanoseconds, where k follows from its
distance to the decimal point. Digits below one nanosecond are dropped (truncation toward
zero). Numbers with a sign or an exponent, and numbers too large for int64 nanoseconds, take a
slow exact path through `decimal`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation, localcontext

import numpy as np
import numpy.typing as npt

__all__ = ["us_text_to_ns"]

_SEP = 32  # b" "
_DOT = 46  # b"."
_ZERO = 48
_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
# Integer digits before the point that fit in int64 ns (2**63 ns is 9.22e15 us): 16 digits
# fit when the first is below 9; longer or larger numbers take the slow path.
_MAX_INT_DIGITS = 16


_JSON_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _slow_one(text: bytes, default: int) -> int | None:
    """Exact ns of one number text (a quoted number too); None if it is not a number."""
    text = text.strip()
    if len(text) >= 2 and text[:1] == b'"' and text[-1:] == b'"':
        text = text[1:-1].strip()
    if not text:
        return default
    if not _JSON_NUMBER.fullmatch(text):
        return None
    with localcontext() as ctx:
        ctx.prec = 80  # exact for any text up to 80 digits, so int() truncates, never rounds
        try:
            value = Decimal(text.decode("ascii")) * 1000
        except (InvalidOperation, UnicodeDecodeError):
            return None
    if not value.is_finite():
        return None
    ns = int(value)
    return ns if -(2**63) <= ns < 2**63 else None  # int() truncates toward zero, like the fast path


# Largest integer part (us) whose value in ns, plus 999 ns of fraction, fits in int64.
_MAX_INT_US = (2**63 - 1000) // 1000


def us_text_to_ns(
    texts: Sequence[bytes | bytearray | memoryview] | Sequence[object], default: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Parse JSON number texts given in microseconds into exact integer nanoseconds.

    Args:
        texts: raw JSON number texts (anything bytes-like, e.g. `msgspec.Raw`); an empty text
            means the field was absent.
        default: nanoseconds to use for absent fields.

    Returns:
        `(ns, bad)`: the values, and a mask of texts that were not numbers (their value is
        `default`).
    """
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
    buf = b" ".join(texts) + b" "  # type: ignore[arg-type]
    if buf.count(b" ") != n:  # a text holds a space itself: take them one by one
        return _one_by_one(texts, default)
    fast = _fast(buf, n)
    if fast is not None:
        return fast, np.zeros(n, dtype=np.bool_)
    return _general(buf, n, default)


def _one_by_one(
    texts: Sequence[object], default: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    ns = np.full(len(texts), default, dtype=np.int64)
    bad = np.zeros(len(texts), dtype=np.bool_)
    for k, text in enumerate(texts):
        value = _slow_one(bytes(text), default)  # type: ignore[call-overload]
        if value is None:
            bad[k] = True
        else:
            ns[k] = value
    ns[bad] = default
    return ns, bad


def _fast(buf: bytes, n: int) -> npt.NDArray[np.int64] | None:
    """The common case, plain `123` or `123.456` texts, parsed by numpy's C text reader.

    Returns None when any text needs the general path (empty, signed, exponent, odd dots,
    overflow), so the caller can fall back; never a wrong value.
    """
    a = np.frombuffer(buf, dtype=np.uint8)
    seps = np.flatnonzero(a == _SEP)
    if seps.shape[0] != n or seps[0] == 0 or (n > 1 and int(np.diff(seps).min()) < 2):
        return None  # an empty text (absent field)
    if np.count_nonzero(a > _ZERO + 9) or np.count_nonzero((a < _ZERO) & (a != _SEP) & (a != _DOT)):
        return None  # signs, exponents, junk
    dots = np.flatnonzero(a == _DOT)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = seps[:-1] + 1
    if dots.shape[0] == 0:
        if int((seps - starts).max()) > 16:
            return None
        ints: npt.NDArray[np.int64] = np.fromstring(buf, dtype=np.int64, sep=" ")
        if ints.shape[0] != n or int(ints.max()) > _MAX_INT_US:
            return None
        return ints * 1000
    dot_num = np.searchsorted(seps, dots)
    if dots.shape[0] > 1 and int(np.diff(dot_num).min()) < 1:
        return None  # two dots in one text
    frac_len = seps[dot_num] - dots - 1
    int_end = seps.copy()
    int_end[dot_num] = dots
    int_len = int_end - starts
    if int(int_len.min()) < 1 or int(int_len.max()) > 16:
        return None  # ".5" or too many digits
    if int(frac_len.min()) < 1 or int(frac_len.max()) > 18:
        return None  # "5." or too many digits
    pieces: npt.NDArray[np.int64] = np.fromstring(buf.replace(b".", b" "), dtype=np.int64, sep=" ")
    if pieces.shape[0] != n + dots.shape[0]:
        return None
    has_dot = np.zeros(n, dtype=np.int64)
    has_dot[dot_num] = 1
    int_idx = np.arange(n, dtype=np.int64) + np.cumsum(has_dot) - has_dot
    int_us = pieces[int_idx]
    if int(int_us.max()) > _MAX_INT_US:
        return None
    ns: npt.NDArray[np.int64] = int_us * 1000
    frac = pieces[int_idx[dot_num] + 1]
    # A fraction of L digits is frac * 10**(3 - L) ns; digits below a nanosecond are dropped.
    up = frac_len <= 3
    frac_ns = np.where(
        up,
        frac * _POW10[np.clip(3 - frac_len, 0, 3)],
        frac // _POW10[np.clip(frac_len - 3, 0, 18)],
    )
    ns[dot_num] += frac_ns
    return ns


def _general(
    buf: bytes, n: int, default: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Every valid JSON number, one digit at a time (vectorized), signs via `decimal`."""
    ns = np.full(n, default, dtype=np.int64)
    bad = np.zeros(n, dtype=np.bool_)
    a = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(a == _SEP)  # one separator after every number
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts

    digit = a - _ZERO  # uint8 wraps for non-digits: those are >= 10
    is_digit = digit < 10
    is_dot = a == _DOT
    # Any byte that is neither digit, dot nor separator sends its number to the slow path.
    odd_pos = np.flatnonzero(~(is_digit | is_dot) & (a != _SEP))
    odd_num = np.unique(np.searchsorted(ends, odd_pos))

    # Position of the decimal point of each number (its end when it has none).
    dot_at = ends.copy()
    dot_pos = np.flatnonzero(is_dot)
    if dot_pos.size:
        dot_num = np.searchsorted(ends, dot_pos)
        # A second dot makes the text invalid: slow path decides.
        multi = np.flatnonzero(np.bincount(dot_num, minlength=n) > 1)
        odd_num = np.union1d(odd_num, multi)
        dot_at[dot_num] = dot_pos
    int_digits = dot_at - starts
    too_long = np.flatnonzero(
        (int_digits > _MAX_INT_DIGITS)
        | ((int_digits == _MAX_INT_DIGITS) & (a[np.minimum(starts, a.shape[0] - 1)] >= _ZERO + 9))
    )
    odd_num = np.union1d(odd_num, too_long).astype(np.int64)

    # Exponent (in ns) of every byte: integer digits count down to 3 at the point, fraction
    # digits count down from 2. Bytes whose exponent is out of [0, 18] contribute nothing.
    num_of_byte = np.repeat(np.arange(n), lengths + 1)
    pos = np.arange(a.shape[0], dtype=np.int64)
    rel = dot_at[num_of_byte] - pos  # > 0 before the point, <= 0 after it
    exp = np.where(rel > 0, rel + 2, rel + 3)
    use = is_digit & (exp >= 0) & (exp <= 18)
    contrib = np.where(use, digit.astype(np.int64) * _POW10[np.clip(exp, 0, 18)], 0)
    vals = np.add.reduceat(contrib, starts)

    present = lengths > 0
    ns[present] = vals[present]
    empty_with_dot = present & (lengths == (dot_at == starts).astype(np.int64))
    bad |= empty_with_dot  # a lone "."
    for k in odd_num.tolist():
        text = buf[starts[k] : ends[k]]
        value = _slow_one(text, default)
        if value is None:
            ns[k] = default
            bad[k] = True
        else:
            ns[k] = value
    ns[bad] = default
    return ns, bad
