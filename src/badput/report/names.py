"""Kernel names short enough for a table column, and never two alike.

A CUDA kernel name from a trace is a demangled C++ signature, often hundreds of characters
long: `void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::
silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::...::{lambda(c10::BFloat16)#1},
std::array<char*, 2ul> >(int, ...)`. Eliding every template and argument list makes a dozen
different kernels print as the same `at::native::vectorized_elementwise_kernel<…>(…)`.

`distinct_names` keeps what tells kernels apart: the kernel's name, and from its template
arguments the functor and function names (`silu_kernel`, `MulFunctor`), the dtypes (`bf16`,
`fp32`, `e4m3`) and the numbers (tile sizes, vector widths), as much as the width allows;
argument lists are dropped. Names that still print alike are shown around where they differ,
and as a last resort get a short stable hash suffix (`#a3f`, the first hex digits of the full
name's SHA-1).

Some traces (ROCm's, Triton's, any kernel launched by symbol) record the Itanium-mangled
symbol (`_ZN7ck_tile6kentry...`): it is demangled first (`demangle`). A copy's name
(`Memcpy HtoD (Pinned -> Device)`) keeps its direction and its host memory kind, the part
that tells a pinned copy from a pageable one, at any width. Elision never cuts a number.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from badput.report.units import elide_middle, trim_head, trim_tail

__all__ = ["MIN_DISTINCT_WIDTH", "demangle", "distinct_names", "short_name"]

#: Below this width `distinct_names` still keeps each name within the width but can no longer
#: promise that different names print differently.
MIN_DISTINCT_WIDTH = 8

_ELLIPSIS = "…"
_TOKEN = re.compile(
    r"(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<num>-?\d+(?:\.\d+)?[uUlLfF]*)"
    r"|(?P<scope>::)"
    r"|(?P<sym>.)",
    re.S,
)
# Identifiers that say nothing about which kernel it is; their template arguments still count.
_NOISE = frozenset(
    {
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "func_wrapper_t",
        "operator",
        "const",
        "volatile",
        "lambda",
        "unsigned",
        "signed",
        "int",
        "long",
        "short",
        "char",
        "bool",
        "size_t",
        "void",
        "auto",
        "struct",
        "class",
        "enum",
        "anonymous",
        "namespace",
    }
)
# Identifiers whose template arguments are plumbing (pointer arrays, offset calculators).
_PLUMBING = frozenset(
    {
        "array",
        "Array",
        "OffsetCalculator",
        "TrivialOffsetCalculator",
        "LoadWithCast",
        "StoreWithCast",
        "LoadWithoutCast",
        "StoreWithoutCast",
        "TensorInfo",
        "TensorIterator",
        "TensorIteratorBase",
    }
)
# Type spellings -> compact dtype, checked in order on the lower-cased identifier.
_DTYPE_PATTERNS = (
    ("bfloat16", "bf16"),
    ("e4m3", "e4m3"),
    ("e5m2", "e5m2"),
    ("tfloat32", "tf32"),
    ("half", "fp16"),
)
_DTYPE_EXACT = {
    "float": "fp32",
    "double": "fp64",
    "float2": "fp32x2",
    "float4": "fp32x4",
    "__nv_bfloat162": "bf16x2",
    "__half2": "fp16x2",
    "int8_t": "i8",
    "uint8_t": "u8",
    "int4b_t": "i4",
}
# Spellings of the detail string used to find where two colliding names differ.
_COMPACT_TYPES = (
    ("c10::BFloat16", "bf16"),
    ("cutlass::bfloat16_t", "bf16"),
    ("__nv_bfloat16", "bf16"),
    ("c10::Half", "fp16"),
    ("cutlass::half_t", "fp16"),
)
_QUALIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*::(?!\{)")


# libstdc++ (Linux) or libc++ (macOS): both export the Itanium ABI's `__cxa_demangle`.
_CXX_LIBRARIES = ("libstdc++.so.6", "libc++.1.dylib", "libc++.dylib")
# Longest symbol handed to the C++ runtime (a trace is untrusted input).
_MAX_MANGLED = 16_384


def _cxx_libraries() -> Iterator[str | None]:
    """The C++ runtime's sonames to load, then the one `find_library` finds.

    `find_library` runs `ldconfig -p` in a child process: it is asked only where no soname
    loads.
    """
    yield from _CXX_LIBRARIES
    from ctypes import util

    yield util.find_library("stdc++")


@functools.cache
def _cxa_demangle() -> Callable[[str], str | None] | None:
    """`__cxa_demangle` of the C++ runtime through ctypes, or None where there is none."""
    if sys.platform == "win32":
        return None
    for name in _cxx_libraries():
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).__cxa_demangle
            free = ctypes.CDLL(None).free
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]  # fmt: skip
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        return functools.partial(_call_demangler, fn, free)
    return None


def _call_demangler(fn: Any, free: Any, symbol: str) -> str | None:
    """One call of `__cxa_demangle`; the buffer it returns is freed here (its contract)."""
    status = ctypes.c_int(0)
    out = fn(symbol.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not out:
        return None
    try:
        text: str = ctypes.string_at(out).decode("utf-8", "replace")
    finally:
        free(out)
    return text if status.value == 0 else None


_SOURCE_NAME = re.compile(r"(\d+)")


def _demangle_nested(symbol: str) -> str | None:
    """The qualified name of an Itanium symbol, by a small parser: `ck_tile::kentry`.

    Only the leading (possibly nested) name is read: `_Z` `N`? (`St` | length identifier)+.
    Template and function arguments are left out. None when it does not parse.
    """
    i = 2
    nested = symbol.startswith("N", i)
    if nested:
        i += 1
        while i < len(symbol) and symbol[i] in "rVKRO":  # cv- and ref-qualifiers
            i += 1
    parts: list[str] = []
    while i < len(symbol):
        if symbol.startswith("St", i):
            parts.append("std")
            i += 2
            continue
        m = _SOURCE_NAME.match(symbol, i)
        if m is None:
            break
        n = int(m.group(1))
        start = m.end()
        if n <= 0 or start + n > len(symbol):
            return None
        parts.append(symbol[start : start + n])
        i = start + n
        if not nested:
            break
    if not parts:
        return None
    tail = symbol[i : i + 1]
    return "::".join(parts) + ("<…>" if tail == "I" else "")


@functools.lru_cache(maxsize=8192)
def demangle(name: str) -> str:
    """An Itanium-mangled symbol (`_Z...`) as C++; any other name as it is.

    The C++ runtime's `__cxa_demangle` (through ctypes, loaded once) gives the full
    signature; without it, or where it refuses the symbol, a small parser recovers the
    qualified name (`ck_tile::kentry<…>`); failing that the name comes back unchanged.

    Example:
        >>> demangle("_Z10add_kernelPfS_i")
        'add_kernel(float*, float*, int)'
        >>> demangle("Memcpy HtoD (Pinned -> Device)")
        'Memcpy HtoD (Pinned -> Device)'
    """
    symbol = name.strip()
    if not symbol.startswith("_Z") or len(symbol) > _MAX_MANGLED:
        return name
    symbol = symbol.split(" ", 1)[0]  # a trailing " [clone ...]" or launch suffix
    call = _cxa_demangle()
    if call is not None:
        try:
            full = call(symbol)
        except (OSError, ValueError):  # pragma: no cover - the runtime failed
            full = None
        if full:
            return full
    return _demangle_nested(symbol) or name


# `Memcpy HtoD (Pageable -> Device)`, `Memcpy DtoH (Device -> Pinned)`, `Memset (Device)`: the
# names the CUDA/ROCm profilers give copies and sets (Kineto's CuptiActivityApi).
_MEMORY = re.compile(r"^(Memcpy|Memset)\s*(\w+)?\s*\(\s*(\w+)(?:\s*->\s*(\w+))?\s*\)\s*$")


def _memory_forms(name: str) -> list[str] | None:
    """Shorter spellings of a copy's or set's name, each keeping what tells copies apart.

    The direction, and the memory kind of every side that is not `Device` (Pinned,
    Pageable, Managed...). None for any other name.

    Example:
        >>> _memory_forms("Memcpy HtoD (Pinned -> Device)")[2:]
        ['Memcpy HtoD Pinned', 'HtoD Pinned']
        >>> _memory_forms("Memcpy DtoD (Device -> Device)")[2:]
        ['Memcpy DtoD', 'DtoD']
    """
    m = _MEMORY.match(name.strip())
    if m is None:
        return None
    op, direction, src, dst = m.groups()
    sides = [src] if dst is None else [src, dst]
    kinds = [k for k in sides if k != "Device"]
    if dst is not None and src == dst and src != "Device":
        kinds = [src]
    inner = "->".join(sides)
    head = f"{op} {direction}" if direction else op
    forms = [name.strip(), f"{head} ({inner})", " ".join([head, *kinds])]
    forms.append(" ".join([direction or op, *kinds]))
    return list(dict.fromkeys(forms))


def _dtype(ident: str) -> str | None:
    exact = _DTYPE_EXACT.get(ident)
    if exact is not None:
        return exact
    low = ident.lower()
    if len(low) > 24:  # a long identifier is a name that mentions a dtype, not a type
        return None
    for needle, short in _DTYPE_PATTERNS:
        if needle in low:
            return short
    return None


def _clean(name: str) -> str:
    """The name demangled, without `void `, anonymous namespaces and surrounding blanks."""
    name = demangle(name).strip()
    if name.startswith("void "):
        name = name[5:]
    return name.replace("(anonymous namespace)::", "").replace("(anonymous namespace)", "")


def _is_call_paren(text: str, i: int) -> bool:
    """Whether the `(` at `i` opens an argument list (directly after a name or `>`)."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>]")


def _split(name: str) -> tuple[str, str | None]:
    """(the kernel's qualified name, its top-level template argument text or None).

    The argument list and anything after it are dropped. A name that does not parse as a
    C++ signature (`Memcpy HtoD (Pageable -> Device)`) comes back whole.
    """
    for i, ch in enumerate(name):
        if ch == "<":
            depth = 0
            for j in range(i, len(name)):
                if name[j] == "<":
                    depth += 1
                elif name[j] == ">":
                    depth -= 1
                    if depth == 0:
                        return name[:i], name[i + 1 : j]
            return name[:i], name[i + 1 :]
        if ch == "(" and _is_call_paren(name, i):
            return name[:i], None
    return name, None


@dataclass(frozen=True)
class _Token:
    text: str
    rank: int  # 0: names and dtypes, 1: numbers, 2: booleans


def _salient(args: str) -> list[_Token]:
    """What in a template argument text tells kernels apart, in order, dtypes and names once.

    Namespaces, argument lists (except the dtypes of a lambda's parameters), plumbing types
    and lambda numbers are left out.
    """
    out: list[_Token] = []
    seen: set[str] = set()
    tokens = [(m.lastgroup or "sym", m.group()) for m in _TOKEN.finditer(args)]
    i, n = 0, len(tokens)
    paren = 0  # depth inside argument lists
    lambda_paren = 0  # depth inside a lambda's parameter list
    skip_angle = 0  # depth inside the template arguments of a plumbing type
    prev = ""
    while i < n:
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < n else ""
        if kind == "sym":
            if text == "(":
                if prev == "lambda" or lambda_paren:
                    lambda_paren += 1
                else:
                    paren += 1
            elif text == ")":
                if lambda_paren:
                    lambda_paren -= 1
                elif paren:
                    paren -= 1
            elif text == "<" and skip_angle:
                skip_angle += 1
            elif text == ">" and skip_angle:
                skip_angle -= 1
            if not text.isspace():
                prev = text
            i += 1
            continue
        if kind == "scope":
            prev = text
            i += 1
            continue
        inside_args = paren > 0 and not lambda_paren
        if skip_angle:
            pass
        elif kind == "num":
            if prev != "#" and not inside_args and not lambda_paren:
                out.append(_Token(text.rstrip("uUlLfF") or text, 1))
        elif kind == "ident":
            dtype = _dtype(text)
            if text in ("true", "false"):
                if not inside_args and not lambda_paren:
                    out.append(_Token("T" if text == "true" else "F", 2))
            elif nxt == "::":
                pass  # a namespace or class qualifier
            elif dtype is not None:
                if not inside_args and dtype not in seen:
                    seen.add(dtype)
                    out.append(_Token(dtype, 0))
            elif text in _PLUMBING:
                if nxt == "<":
                    skip_angle = 1
                    i += 1  # past the "<"
            elif text in _NOISE or inside_args or lambda_paren:
                pass
            elif text not in seen:
                seen.add(text)
                out.append(_Token(text, 0))
        prev = text
        i += 1
    return out


@dataclass(frozen=True)
class _Forms:
    """Renderings of one name: complete ones, most detail first, and the parts behind them."""

    complete: list[str]
    unqualified: str
    names: list[str]  # the name and dtype tokens of the template arguments
    full: str  # the unqualified name with every salient template argument
    names_numbers: list[str]  # the template arguments' names, dtypes and numbers
    names_at: int  # where in `complete` the form without numbers is


def _forms(name: str) -> _Forms:
    clean = _clean(name)
    base, args = _split(clean)
    base = base.strip() or clean
    unqualified = base.rsplit("::", 1)[-1] or base
    if args is None:
        plain = list(dict.fromkeys([base, unqualified]))
        return _Forms(plain, unqualified, [], unqualified, [], len(plain))
    tokens = _salient(args)
    out: list[str] = []

    def render(head: str, parts: list[str]) -> str:
        return f"{head}<{', '.join(parts) if parts else _ELLIPSIS}>"

    full = [t.text for t in tokens]
    names_numbers = [t.text for t in tokens if t.rank <= 1]
    names = [t.text for t in tokens if t.rank == 0]
    for head, parts in ((base, full), (unqualified, full), (unqualified, names_numbers)):
        text = render(head, parts)
        if text not in out:
            out.append(text)
    names_at = len(out)
    out.append(render(unqualified, names))
    return _Forms(out, unqualified, names, render(unqualified, full), names_numbers, names_at)


def _cut(forms: _Forms, width: int) -> str | None:
    """The name with its leading template arguments that fit, if every name and dtype does.

    `wgrad_alg0_engine<fp32, 128, 6, 7, …>`: numbers after the names kept as far as they go.
    """
    kept: list[str] = []
    used = len(forms.unqualified) + len("<…>")
    for part in forms.names_numbers:
        if used + len(part) + 2 > width:
            break
        kept.append(part)
        used += len(part) + 2
    if len(kept) == len(forms.names_numbers) or not set(forms.names) <= set(kept):
        return None
    return f"{forms.unqualified}<{', '.join([*kept, _ELLIPSIS])}>"


_TILE = re.compile(r"\d+x\d+")
_DTYPE_WORD = re.compile(
    r"bf16|fp16|f16|f32|tf32|f64|fp8|e4m3|e5m2|int8|i8|s8|half|float|[shd]gemm"
)


def _word_rank(word: str) -> int:
    """How much one `_`-separated word of a flat kernel name says: 3 (a tile) down to 0."""
    tile = _TILE.search(word)
    if tile and set(re.findall(r"\d+", word)) != {"1"}:  # 1x1x1 says little
        return 3
    if _DTYPE_WORD.search(word.lower()):
        return 2
    return 1 if any(c.isdigit() for c in word) else 0


def _elide_words(text: str, width: int) -> str | None:
    """A flat `a_b_c` name within `width`, its least telling words dropped first.

    Words without digits go first, then ones with digits, then dtypes, then tile sizes
    (`128x128x64`), each from the right; the first word stays. Runs of dropped words show as
    `…` (`_…` beside a word ending in a digit). None when the name is not made of words or
    does not fit even so.

    Example:
        >>> _elide_words("volta_scudnn_128x64_stridedB_splitK_xregs_large_nn_v1", 40)
        'volta_scudnn_128x64_stridedB_splitK…v1'
    """
    words = text.split("_")
    if len(words) < 3:
        return None
    keep = [True] * len(words)
    order = sorted(range(1, len(words)), key=lambda i: (_word_rank(words[i]), -i))

    def gap(before: str, after: str) -> str:
        # A word's number never touches the `…`: `sm90_…bf16`, not `sm90…bf16`.
        left = "_" if before[-1:].isdigit() else ""
        right = "_" if after[:1].isdigit() else ""
        return left + _ELLIPSIS + right

    def render() -> str:
        out: list[str] = []
        dropped = False
        for word, kept in zip(words, keep, strict=True):
            if not kept:
                dropped = True
                continue
            if out:
                out.append(gap(out[-1], word) if dropped else "_")
            out.append(word)
            dropped = False
        return "".join(out) + (gap(out[-1] if out else "", "") if dropped else "")

    for n, i in enumerate(order):
        keep[i] = False
        if len(render()) <= width:
            # Room left: take back dtypes and tiles dropped on the way, most telling first.
            for j in reversed(order[:n]):
                if _word_rank(words[j]) >= 2:
                    keep[j] = True
                    if len(render()) > width:
                        keep[j] = False
            return render()
    return None


_DTYPE_SHORT = frozenset([*_DTYPE_EXACT.values(), *(short for _, short in _DTYPE_PATTERNS)])


def _elide_args(names: list[str], room: int) -> str:
    """Template argument names within `room`: dtypes kept whole at the end, the rest elided.

    Example:
        >>> _elide_args(["ReduceOp", "fp32", "sum_functor"], 25)
        'ReduceOp…m_functor, fp32'
    """
    inner = ", ".join(names)
    dtypes = [n for n in names if n in _DTYPE_SHORT]
    rest = [n for n in names if n not in _DTYPE_SHORT]
    tail = ", " + ", ".join(dtypes)
    if not dtypes or not rest or len(tail) > room - 6:
        return elide_middle(inner, room)
    return elide_middle(", ".join(rest), room - len(tail)) + tail


def short_name(name: str, width: int = 60) -> str:
    """One name as short as `width` allows, with the most detail that fits (see module doc).

    The first of these that fits: the qualified name with every salient template argument;
    the unqualified name with them; without booleans; the leading ones that fit when these
    hold every name and dtype; without numbers; a flat name (or a lone template argument)
    without its least telling `_`-separated words; the template arguments' names
    middle-elided; the whole middle-elided.

    Example:
        >>> short_name("void at::native::vectorized_elementwise_kernel<4, "
        ...     "at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
        ...     "(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)", 70)
        'at::native::vectorized_elementwise_kernel<4, AddFunctor, fp32>'
    """
    width = max(width, 1)
    memory = _memory_forms(name)
    if memory is not None:
        return next((m for m in memory if len(m) <= width), elide_middle(memory[-1], width))
    forms = _forms(name)
    for i, c in enumerate(forms.complete):
        if i == forms.names_at and forms.names:
            cut = _cut(forms, width)
            if cut is not None:
                return cut
        if len(c) <= width:
            return c
    inner = ", ".join(forms.names)
    if not inner:  # a flat name: drop its least telling words
        words = _elide_words(forms.unqualified, width)
        if words is not None:
            return words
    room = width - len(forms.unqualified) - 2
    if inner and room >= 8:
        if len(forms.names) == 1:  # one long identifier: drop its least telling words
            words = _elide_words(inner, room)
            if words is not None:
                return f"{forms.unqualified}<{words}>"
        return f"{forms.unqualified}<{_elide_args(forms.names, room)}>"
    if inner and width >= 16:  # the name gives way too: about half each
        args = min(len(inner), (width - 2) // 2)
        return f"{elide_middle(forms.unqualified, width - 2 - args)}<{elide_middle(inner, args)}>"
    bare = f"{forms.unqualified}<{_ELLIPSIS}>" if inner else forms.complete[-1]
    return elide_middle(bare, width)


def _detail(name: str) -> str:
    """The whole name with qualifiers dropped and long dtypes compacted: where names differ."""
    text = _clean(name)
    for long, short in _COMPACT_TYPES:
        text = text.replace(long, short)
    return _QUALIFIER.sub("", text)


def _in_number(text: str, i: int) -> bool:
    """Whether `text[i]` is part of a number (a digit, or `.`/`,`/`x` between digits)."""
    if not 0 <= i < len(text):
        return False
    if text[i].isdigit():
        return True
    return (
        text[i] in ".,x"
        and 0 < i < len(text) - 1
        and text[i - 1].isdigit()
        and text[i + 1].isdigit()
    )


def _around(text: str, at: int, width: int) -> str:
    """`text` within `width`: its head, then the part from the token holding index `at` on.

    A number is kept whole or left out, never cut, and never touches the `…`.
    """
    if len(text) <= width:
        return text
    if at + 10 <= width - 1:
        return trim_head(text[: width - 1]) + _ELLIPSIS
    head = max(min(width // 3, 24), 1)
    room = width - head - 1  # after "head…"
    if room < 4:
        return elide_middle(text, width)
    # Start at the token (or `_`-separated word) holding `at`, if it starts near enough.
    start = max(text.rfind(sep, 0, at) + len(sep) for sep in (", ", "<", "_", " ", ":"))
    if start < head or at - start > room // 2:
        start = max(at - 2, head)
    while start > head and (_in_number(text, start) or text[start] in ".,"):
        start -= 1  # back to the start of the number, and the character before it
    window = text[start:]
    if len(window) > room:
        window = trim_head(window[: room - 1]) + _ELLIPSIS
    else:  # the rest fits: give the head the room left
        head = min(width - 1 - len(window), start)
    return trim_head(text[:head]) + _ELLIPSIS + trim_tail(window)


def _common_prefix(texts: list[str]) -> int:
    first, last = min(texts), max(texts)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return n


def _tag(name: str, length: int) -> str:
    return "#" + hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _collisions(shown: dict[str, str]) -> list[list[str]]:
    by_text: dict[str, list[str]] = {}
    for name, text in shown.items():
        by_text.setdefault(text, []).append(name)
    return [sorted(group) for group in by_text.values() if len(group) > 1]


def distinct_names(names: list[str], width: int) -> list[str]:
    """Display forms of `names`, each at most `width` characters, different names differing.

    Each name gets the most detail that fits (`short_name`). Names that still print alike are
    shown from the point where their full forms differ; those still alike then end in a
    stable hash suffix (`#a3f`). Equal names get equal forms. Distinctness holds for any
    `width` >= `MIN_DISTINCT_WIDTH`; below it names only stay within the width.

    Args:
        names: kernel (or any) names, in display order; repeats allowed.
        width: the column width, in characters.

    Returns:
        One display form per name, in the same order.

    Example:
        >>> a = "void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int)"
        >>> b = "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int)"
        >>> distinct_names([a, b], 40)
        ['wgrad_alg0_engine<fp32, 128, 5, 5, 3, …>', 'wgrad_alg0_engine<fp32, 128, 6, 7, 3, …>']
    """
    width = max(width, 1)
    unique = list(dict.fromkeys(names))
    shown = {n: short_name(n, width) for n in unique}
    if width >= MIN_DISTINCT_WIDTH:
        # Show colliding names around where their full forms differ, a few rounds.
        for _ in range(3):
            groups = _collisions(shown)
            if not groups:
                break
            for group in groups:
                full_forms = {n: _forms(n).full for n in group}
                for rendering in (full_forms, {n: _detail(n) for n in group}):
                    texts = list(rendering.values())
                    if len(set(texts)) < len(texts):
                        continue  # some differ only in what this rendering leaves out
                    at = _common_prefix(texts)
                    tried = {n: _around(t, at, width) for n, t in rendering.items()}
                    if len(set(tried.values())) == len(tried):
                        shown.update(tried)
                        break
                else:
                    raw = {n: _clean(n) for n in group}
                    at = _common_prefix(list(raw.values()))
                    shown.update({n: _around(t, at, width) for n, t in raw.items()})
        shown = _with_tags(shown, width)
    return [shown[n] for n in names]


def _with_tags(shown: dict[str, str], width: int) -> dict[str, str]:
    """`shown` with a hash suffix on every name that still prints like another."""
    base = dict(shown)
    length = 3
    while length <= min(width - 2, 40):
        groups = _collisions(shown)
        if not groups:
            return shown
        for group in groups:
            for n in group:
                tag = _tag(n, length)
                shown[n] = elide_middle(base[n], width - len(tag)) + tag
        length += 1
    # Hash prefixes of every length that fits collided: count instead.
    counter = 0
    for group in _collisions(shown):
        for n in group[1:]:
            while True:
                counter += 1
                tag = f"#{counter}"
                text = elide_middle(base[n], max(width - len(tag), 0)) + tag
                if text not in shown.values():
                    shown[n] = text
                    break
    return shown
