"""`us_text_to_ns`: JSON microsecond texts to exact integer nanoseconds, never via float64."""

from __future__ import annotations

import decimal
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.trace.numbers import us_text_to_ns

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
DEFAULT = -7  # a default that no case below produces by itself

# (text, expected ns or None for "bad": value is the default and the mask is set)
CASES: list[tuple[bytes, int | None]] = [
    # integers
    (b"0", 0),
    (b"1", 1_000),
    (b"123", 123_000),
    (b"00012", 12_000),
    # 16-digit epoch microseconds (Kineto's timestamps)
    (b"1712195495519689", 1_712_195_495_519_689_000),
    (b"8999999999999999", 8_999_999_999_999_999_000),
    # fractions up to 3 digits are exact
    (b"1.5", 1_500),
    (b"1.25", 1_250),
    (b"0.001", 1),
    (b"0.04", 40),
    (b"0.0", 0),
    (b"2.100", 2_100),
    (b"1712195495519689.047", 1_712_195_495_519_689_047),
    (b"1712195495519689.5", 1_712_195_495_519_689_500),
    # more than 3 fraction digits: truncated toward zero
    (b"0.0005", 0),
    (b"1.9999", 1_999),
    (b"0.1234567890123456789", 123),
    (b"1.0000000000000000001", 1_000),
    (b"1.12345678901234567890123", 1_123),
    (b"1712195495519689.0479999", 1_712_195_495_519_689_047),
    (b"-0.0009", 0),
    (b"-1.9999", -1_999),
    # signs and exponents (the exact slow path)
    (b"-5.5", -5_500),
    (b"-0", 0),
    (b"-1712195495519689.047", -1_712_195_495_519_689_047),
    (b"1e3", 1_000_000),
    (b"1E-3", 1),
    (b"1.5e-1", 150),
    (b"2.5E+2", 250_000),
    (b"1e-4", 0),
    # odd but readable forms
    (b"3.", 3_000),
    (b".5", 500),
    # the edges of int64 nanoseconds
    (b"9223372036854775.807", INT64_MAX),
    (b"-9223372036854775.808", INT64_MIN),
    (b"9223372036854775", 9_223_372_036_854_775_000),
    # beyond int64: bad
    (b"9223372036854775.808", None),
    (b"9223372036854776", None),
    (b"9999999999999999", None),
    (b"-9223372036854775.809", None),
    (b"99999999999999999999", None),
    (b"1e400", None),
    # garbage: bad
    (b"abc", None),
    (b"1.2.3", None),
    (b"-", None),
    (b"0x10", None),
    (b"nan", None),
    (b"inf", None),
    (b"\xff", None),
    (b"1a", None),
]


def _check(texts: list[bytes], expected: list[int | None], default: int = DEFAULT) -> None:
    ns, bad = us_text_to_ns(texts, default=default)
    assert ns.dtype == np.int64
    assert bad.dtype == np.bool_
    assert ns.shape == bad.shape == (len(texts),)
    for i, (text, exp) in enumerate(zip(texts, expected, strict=True)):
        if exp is None:
            assert bool(bad[i]), f"{text!r} should be bad"
            assert int(ns[i]) == default, f"{text!r}: a bad text takes the default"
        else:
            assert not bool(bad[i]), f"{text!r} should parse"
            assert int(ns[i]) == exp, f"{text!r}: got {int(ns[i])}, expected {exp}"


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0].decode("latin-1") for c in CASES])
def test_single_text(text: bytes, expected: int | None) -> None:
    _check([text], [expected])


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0].decode("latin-1") for c in CASES])
def test_text_in_general_batch(text: bytes, expected: int | None) -> None:
    # An empty text in the batch forces the general (non-fast) path for all of it.
    _check([b"1.5", text, b"", b"42"], [1_500, expected, DEFAULT, 42_000])


def test_whole_table_in_one_batch() -> None:
    texts = [c[0] for c in CASES]
    _check(texts, [c[1] for c in CASES])
    _check(texts[::-1], [c[1] for c in CASES][::-1])


def test_empty_text_takes_default() -> None:
    _check([b""], [0], default=0)
    ns, bad = us_text_to_ns([b"", b"", b"3"], default=123)
    assert ns.tolist() == [123, 123, 3_000]
    assert bad.tolist() == [False, False, False]


def test_empty_batch() -> None:
    ns, bad = us_text_to_ns([])
    assert ns.shape == (0,) and ns.dtype == np.int64
    assert bad.shape == (0,) and bad.dtype == np.bool_


def test_accepts_bytes_like_inputs() -> None:
    import msgspec

    texts = [msgspec.Raw(b"1.5"), bytearray(b"2"), memoryview(b"0.004"), b"7"]
    ns, bad = us_text_to_ns(texts)
    assert ns.tolist() == [1_500, 2_000, 4, 7_000]
    assert not bad.any()


def test_epoch_fraction_exact_not_float64() -> None:
    text = b"1712195495519689.047"
    expected = 1_712_195_495_519_689_047
    # float64 cannot hold it: its spacing at 1.7e15 us is 0.25 us.
    via_float = int(float(text) * 1000)
    assert via_float != expected
    assert abs(via_float - expected) >= 10
    for batch in ([text], [text, b"-1"], [text, b""], [text] * 5):
        ns, bad = us_text_to_ns(batch)
        assert int(ns[0]) == expected
        assert not bad[0]


# ---- against an exact reference --------------------------------------------------------------


def _reference(text: bytes) -> int | None:
    """Exact ns, truncated toward zero, or None outside int64 (no 28-digit rounding)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 200
        value = int(Decimal(text.decode()) * 1000)
    return value if INT64_MIN <= value <= INT64_MAX else None


@st.composite
def unsigned_texts(draw: st.DrawFn) -> bytes:
    """Plain `123` / `123.456...` texts, the kind Kineto writes (fast path when alone)."""
    whole = draw(
        st.one_of(
            st.integers(0, 9_223_372_036_854_775).map(str),  # fits int64 ns
            st.integers(0, 10**17).map(str),  # may not
            st.text("0123456789", min_size=1, max_size=4),  # leading zeros
        )
    )
    frac = draw(st.one_of(st.just(None), st.text("0123456789", min_size=1, max_size=25)))
    return (whole if frac is None else f"{whole}.{frac}").encode()


@st.composite
def slow_texts(draw: st.DrawFn) -> bytes:
    """Signed or exponent texts (the decimal path); at most 25 significant digits."""
    whole = draw(st.integers(0, 10**16).map(str))
    frac = draw(st.text("0123456789", min_size=0, max_size=max(0, 25 - len(whole))))
    sign = draw(st.sampled_from(["", "-", "-", ""]))
    exp = draw(st.one_of(st.just(""), st.integers(-12, 4).map(lambda e: f"e{e}")))
    if not sign and not exp:
        sign = "-"
    body = whole if not frac else f"{whole}.{frac}"
    return f"{sign}{body}{exp}".encode()


def _check_reference(texts: list[bytes]) -> None:
    ns, bad = us_text_to_ns(texts, default=DEFAULT)
    for i, text in enumerate(texts):
        exp = _reference(text)
        if exp is None:
            assert bool(bad[i]) and int(ns[i]) == DEFAULT, text
        else:
            assert not bool(bad[i]), text
            assert int(ns[i]) == exp, f"{text!r}: got {int(ns[i])}, expected {exp}"


@settings(max_examples=300, deadline=None)
@given(st.lists(unsigned_texts(), min_size=1, max_size=30))
def test_unsigned_batches_match_decimal(texts: list[bytes]) -> None:
    _check_reference(texts)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(unsigned_texts(), min_size=0, max_size=20),
    st.sampled_from([b"-1", b""]),
    st.integers(0, 20),
)
def test_mixed_batches_match_decimal(texts: list[bytes], odd: bytes, at: int) -> None:
    # One `-1` or one empty text sends the whole batch down the general path.
    batch = list(texts)
    batch.insert(min(at, len(batch)), odd)
    ns, bad = us_text_to_ns(batch, default=DEFAULT)
    k = min(at, len(texts))
    if odd == b"":
        assert int(ns[k]) == DEFAULT and not bool(bad[k])
    else:
        assert int(ns[k]) == -1_000 and not bool(bad[k])
    rest = batch[:k] + batch[k + 1 :]
    ns_rest = np.concatenate([ns[:k], ns[k + 1 :]])
    bad_rest = np.concatenate([bad[:k], bad[k + 1 :]])
    for i, text in enumerate(rest):
        exp = _reference(text)
        if exp is None:
            assert bool(bad_rest[i]) and int(ns_rest[i]) == DEFAULT, text
        else:
            assert not bool(bad_rest[i]), text
            assert int(ns_rest[i]) == exp, f"{text!r}: got {int(ns_rest[i])}, expected {exp}"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(unsigned_texts(), slow_texts()), min_size=1, max_size=20))
def test_signed_and_exponent_texts_match_decimal(texts: list[bytes]) -> None:
    _check_reference(texts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=1, max_size=20))
def test_ns_round_trip(values: list[int]) -> None:
    # Any int64 nanosecond value written as exact microseconds text reads back unchanged.
    texts = []
    for v in values:
        whole, frac = divmod(abs(v), 1000)
        texts.append(f"{'-' if v < 0 else ''}{whole}.{frac:03d}".encode())
    ns, bad = us_text_to_ns(texts)
    assert not bad.any()
    assert ns.tolist() == values
