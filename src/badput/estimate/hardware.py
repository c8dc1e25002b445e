"""The GPU hardware table: dense peak TFLOP/s, memory, interconnect and power, with sources.

The numbers live in ``gpus.toml`` beside this module (package data, read through
``importlib.resources`` and parsed once). Every number there carries a source: the datasheet, the
section and a URL, or the secondary source it was checked against. Peaks are DENSE (no 2:4
structured sparsity); where a datasheet prints only the sparse figure the table stores half of it
and says so in the entry's ``notes``. A GPU without a tensor path for a precision (no BF16 on a
V100, no FP8 on an A100) has no value for it, and :meth:`GpuSpec.peak` returns ``None``.

Nothing here ever falls back to a default GPU: :func:`lookup_gpu` returns ``None`` and warns when
it does not know a name.
"""

from __future__ import annotations

import functools
import re
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = [
    "PRECISIONS",
    "GpuSpec",
    "UnknownGpuWarning",
    "all_gpus",
    "lookup_gpu",
    "resolve_precision",
]

#: Precisions a peak can be given for, in table order. ``fp64`` is the vector (CUDA-core) rate,
#: ``fp64_tensor`` the FP64 tensor/matrix-core rate, ``fp32`` the vector rate; ``tf32``, ``bf16``,
#: ``fp16``, ``fp8``, ``fp4`` and ``int8`` are tensor-core rates (``int8`` in TOP/s).
PRECISIONS: tuple[str, ...] = (
    "fp64",
    "fp64_tensor",
    "fp32",
    "tf32",
    "bf16",
    "fp16",
    "fp8",
    "fp4",
    "int8",
)


class UnknownGpuWarning(UserWarning):
    """A GPU name that the hardware table does not know; the lookup returned ``None``."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet figures, per GPU, each with its source.

    Treat the dicts as read-only: specs are shared by every lookup.

    Attributes:
        key: Short id, e.g. ``"H100-SXM"``, ``"H800"``, ``"A100-SXM-80GB"``.
        name: Marketing name, e.g. ``"NVIDIA H100 SXM5 80GB"``.
        vendor: ``"NVIDIA"`` or ``"AMD"``.
        peak_tflops: Dense peak TFLOP/s (TOP/s for int8) per precision in :data:`PRECISIONS`;
            a precision is absent when the GPU has no such path or the number is unverified.
        memory_bytes: Memory capacity in bytes (the datasheet's GB x 1e9).
        memory_bw_gbs: Memory bandwidth, GB/s (1e9 B/s).
        interconnect: GPU-to-GPU link, e.g. ``"NVLink 4"``, ``"Infinity Fabric"``, ``"PCIe only"``.
        interconnect_gbs: GPU-to-GPU bandwidth per GPU, both directions, GB/s; ``None`` for a
            PCIe-only GPU, or where the per-GPU figure is unverified (``notes`` says so).
        pcie_gen: PCI Express generation of the host interface.
        tdp_w: Maximum board power / TDP in watts (the top of a configurable range).
        sources: Field name (``"memory_bw_gbs"``, ``"tdp_w"``, ``"peak_tflops.bf16"``, ...) to
            its source: document, section and URL. Every field the entry sets has one.
        notes: How the numbers were derived (e.g. dense = sparse / 2 per the datasheet footnote).
    """

    key: str
    name: str
    vendor: str
    peak_tflops: dict[str, float]
    memory_bytes: int
    memory_bw_gbs: float
    interconnect: str
    interconnect_gbs: float | None
    pcie_gen: int
    tdp_w: float
    sources: dict[str, str]
    notes: str

    def __hash__(self) -> int:
        """Hash by key (the dict fields are not hashable); equal specs have equal keys."""
        return hash(self.key)

    def peak(self, precision: str) -> float | None:
        """Dense peak TFLOP/s at a precision, or ``None`` if this GPU has no such path.

        Args:
            precision: Any name :func:`resolve_precision` accepts (``"bf16"``, ``"BF16"``,
                ``"bfloat16"``, ``"half"``, ``"e4m3"``, ...).

        Raises:
            ValueError: the precision is not one badput knows.
        """
        return self.peak_tflops.get(resolve_precision(precision))


# ---- precisions ----------------------------------------------------------------------------------

_PRECISION_NAMES: dict[str, tuple[str, ...]] = {
    "fp64": ("fp64", "float64", "f64", "double", "dp", "fp64 vector"),
    "fp64_tensor": (
        "fp64_tensor",
        "fp64 tensor core",
        "fp64_tc",
        "fp64 matrix",
        "float64_tensor",
        "dmma",
    ),
    "fp32": ("fp32", "float32", "f32", "float", "single", "sp", "fp32 vector"),
    "tf32": ("tf32", "tensorfloat32", "tensor float 32", "tf32 tensor core"),
    "bf16": ("bf16", "bfloat16", "bfloat", "bf16 tensor core"),
    "fp16": ("fp16", "float16", "f16", "half", "hp", "fp16 tensor core"),
    "fp8": (
        "fp8",
        "float8",
        "e4m3",
        "e5m2",
        "fp8_e4m3",
        "fp8_e5m2",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "mxfp8",
    ),
    "fp4": ("fp4", "float4", "e2m1", "fp4_e2m1", "float4_e2m1fn_x2", "nvfp4", "mxfp4"),
    "int8": ("int8", "i8", "s8", "qint8"),
}

_FRAMEWORK_PREFIX = re.compile(r"^(?:torch|numpy|np|jnp|jax\.numpy|tf|tensorflow)\.")


def _compact(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


_PRECISION_ALIASES: dict[str, str] = {
    _compact(alias): canonical
    for canonical, aliases in _PRECISION_NAMES.items()
    for alias in aliases
}


def resolve_precision(precision: str) -> str:
    """Normalise a precision name to one of :data:`PRECISIONS`.

    Case, spaces, dashes, underscores and a ``torch.``-style prefix do not matter: ``"BF16"``,
    ``"bfloat16"`` and ``"torch.bfloat16"`` give ``"bf16"``; ``"half"`` gives ``"fp16"``;
    ``"e4m3"``, ``"e5m2"`` and ``"float8_e4m3fn"`` give ``"fp8"``; ``"nvfp4"`` and ``"mxfp4"``
    give ``"fp4"``; ``"tensorfloat32"`` gives ``"tf32"``; ``"double"`` gives ``"fp64"``.

    Args:
        precision: The name to normalise.

    Returns:
        The canonical name, an element of :data:`PRECISIONS`.

    Raises:
        ValueError: the name is none of these; the message lists the valid precisions.
    """
    if isinstance(precision, str):
        found = _PRECISION_ALIASES.get(
            _compact(_FRAMEWORK_PREFIX.sub("", precision.strip().lower()))
        )
        if found is not None:
            return found
    raise ValueError(
        f"unknown precision {precision!r}; valid precisions: {', '.join(PRECISIONS)} "
        "(aliases such as bfloat16, half, tensorfloat32, e4m3, float8_e5m2, nvfp4 also work)"
    )


# ---- loading the table ---------------------------------------------------------------------------

#: Fields that need a source when an entry sets them (peaks are sourced per precision).
_SOURCED_FIELDS = (
    "memory_bytes",
    "memory_bw_gbs",
    "interconnect",
    "interconnect_gbs",
    "pcie_gen",
    "tdp_w",
)
_ENTRY_KEYS = frozenset(
    {
        "name",
        "vendor",
        "family",
        "forms",
        "aliases",
        "memory_gb",
        "memory_bw_gbs",
        "interconnect",
        "interconnect_gbs",
        "pcie_gen",
        "tdp_w",
        "notes",
        "peak_tflops",
        "sources",
    }
)
_VENDORS = frozenset({"NVIDIA", "AMD"})
_DOC_REF = re.compile(r"\{(\w+)\}")


class _TableError(RuntimeError):
    """gpus.toml is malformed (a packaging or editing mistake, never a user error)."""


@dataclass(frozen=True)
class _Entry:
    spec: GpuSpec
    family: str
    forms: frozenset[str]
    memory_gb: float


@dataclass(frozen=True)
class _Table:
    entries: tuple[_Entry, ...]
    by_family: Mapping[str, tuple[_Entry, ...]]
    by_compact: Mapping[str, _Entry]


def _get(table: Mapping[str, Any], field: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = table.get(field)
    if value is None:
        raise _TableError(f"gpus.toml [{where}]: missing {field!r}")
    if isinstance(value, bool) or not isinstance(value, kind):
        raise _TableError(f"gpus.toml [{where}]: {field!r} has the wrong type: {value!r}")
    return value


def _positive(table: Mapping[str, Any], field: str, where: str) -> float:
    value = float(_get(table, field, (int, float), where))
    if not value > 0:
        raise _TableError(f"gpus.toml [{where}]: {field!r} must be positive, got {value}")
    return value


def _expand(text: str, docs: Mapping[str, str], where: str) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in docs:
            raise _TableError(f"gpus.toml [{where}]: unknown document reference {{{name}}}")
        return docs[name]

    return _DOC_REF.sub(sub, text)


def _sources(
    raw: Mapping[str, Any],
    docs: Mapping[str, str],
    fields: list[str],
    peaks: list[str],
    where: str,
) -> dict[str, str]:
    allowed = {"*", "peak_tflops", *fields, *(f"peak_tflops.{p}" for p in peaks)}
    for key, value in raw.items():
        if key not in allowed:
            raise _TableError(f"gpus.toml [{where}.sources]: {key!r} names no field it sets")
        if not isinstance(value, str) or not value.strip():
            raise _TableError(f"gpus.toml [{where}.sources]: {key!r} is not a source text")
    out: dict[str, str] = {}
    wanted: list[tuple[str, tuple[str, ...]]] = [(f, (f, "*")) for f in fields]
    wanted += [(f"peak_tflops.{p}", (f"peak_tflops.{p}", "peak_tflops", "*")) for p in peaks]
    for field, keys in wanted:
        text = next((raw[k] for k in keys if k in raw), None)
        if text is None:
            raise _TableError(f"gpus.toml [{where}]: no source for {field!r}")
        out[field] = _expand(text, docs, where)
    return out


def _entry(key: str, raw: Mapping[str, Any], docs: Mapping[str, str]) -> _Entry:
    where = f"gpu.{key}"
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise _TableError(f"gpus.toml [{where}]: unknown fields {sorted(unknown)}")
    vendor = _get(raw, "vendor", str, where)
    if vendor not in _VENDORS:
        raise _TableError(f"gpus.toml [{where}]: vendor {vendor!r} not in {sorted(_VENDORS)}")
    raw_peaks = _get(raw, "peak_tflops", dict, where)
    peaks: dict[str, float] = {}
    for precision in PRECISIONS:  # table order, whatever the file order
        if precision in raw_peaks:
            peaks[precision] = _positive(raw_peaks, precision, f"{where}.peak_tflops")
    if set(raw_peaks) - set(peaks):
        bad = sorted(set(raw_peaks) - set(peaks))
        raise _TableError(f"gpus.toml [{where}.peak_tflops]: unknown precisions {bad}")
    interconnect_gbs = (
        _positive(raw, "interconnect_gbs", where) if "interconnect_gbs" in raw else None
    )
    memory_gb = _positive(raw, "memory_gb", where)
    pcie_gen = _get(raw, "pcie_gen", int, where)
    if not 1 <= pcie_gen <= 7:
        raise _TableError(f"gpus.toml [{where}]: pcie_gen {pcie_gen} out of range")
    fields = [f for f in _SOURCED_FIELDS if f != "interconnect_gbs" or interconnect_gbs]
    forms = _get(raw, "forms", list, where)
    if not forms or not all(isinstance(f, str) and f for f in forms):
        raise _TableError(f"gpus.toml [{where}]: 'forms' must be a list of names")
    spec = GpuSpec(
        key=key,
        name=_get(raw, "name", str, where),
        vendor=vendor,
        peak_tflops=peaks,
        memory_bytes=round(memory_gb * 1e9),
        memory_bw_gbs=_positive(raw, "memory_bw_gbs", where),
        interconnect=_get(raw, "interconnect", str, where),
        interconnect_gbs=interconnect_gbs,
        pcie_gen=pcie_gen,
        tdp_w=_positive(raw, "tdp_w", where),
        sources=_sources(_get(raw, "sources", dict, where), docs, fields, list(peaks), where),
        notes=_get(raw, "notes", str, where),
    )
    family = _get(raw, "family", str, where)
    if family != _compact(family) or not family:
        raise _TableError(f"gpus.toml [{where}]: family {family!r} must be lowercase alphanumerics")
    return _Entry(spec, family, frozenset(forms), memory_gb)


def _parse(text: str) -> _Table:
    data = tomllib.loads(text)
    docs = data.get("docs", {})
    gpus = data.get("gpu")
    if not isinstance(docs, dict) or not all(isinstance(v, str) for v in docs.values()):
        raise _TableError("gpus.toml: [docs] must map names to source texts")
    if not isinstance(gpus, dict) or not gpus:
        raise _TableError("gpus.toml: no [gpu.*] tables")
    entries: list[_Entry] = []
    by_family: dict[str, list[_Entry]] = {}
    by_compact: dict[str, _Entry] = {}
    for key, raw in gpus.items():
        if not isinstance(raw, dict):
            raise _TableError(f"gpus.toml: [gpu.{key}] is not a table")
        entry = _entry(key, raw, docs)
        entries.append(entry)
        by_family.setdefault(entry.family, []).append(entry)
        aliases = raw.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise _TableError(f"gpus.toml [gpu.{key}]: 'aliases' must be a list of names")
        for alias in (key, entry.spec.name, *aliases):
            compact = "".join(_tokens(alias))
            other = by_compact.setdefault(compact, entry)
            if other is not entry:
                raise _TableError(f"gpus.toml: {alias!r} names both {other.spec.key} and {key}")
    return _Table(
        entries=tuple(entries),
        by_family={family: tuple(group) for family, group in by_family.items()},
        by_compact=by_compact,
    )


@functools.cache
def _table() -> _Table:
    text = resources.files("badput.estimate").joinpath("gpus.toml").read_text(encoding="utf-8")
    return _parse(text)


def all_gpus() -> list[GpuSpec]:
    """Every GPU in the table, in table order (by architecture, then variant)."""
    return [entry.spec for entry in _table().entries]


# ---- name matching -------------------------------------------------------------------------------

#: Words that say nothing about which GPU it is.
_NOISE = frozenset({"nvidia", "tesla", "amd", "instinct"})
#: A capacity such as "80GB" or "80 GB"; not a MIG profile's "1g.10gb".
_MEMORY = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*gb(?![a-z0-9])")
_RACK = re.compile(r"nvl\d+|superchip")


def _tokens(name: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", name.lower()) if t not in _NOISE]


def _form(token: str) -> str | None:
    if token.startswith("sxm") or token == "hgx":
        return "sxm"
    if token.startswith("pcie"):
        return "pcie"
    if token in ("nvl", "dgxs", "oam"):
        return token
    if _RACK.fullmatch(token):
        return "rack"
    return None


def _match(name: str) -> _Entry | None:
    tokens = _tokens(name)
    if not tokens:
        return None
    table = _table()
    exact = table.by_compact.get("".join(tokens))
    if exact is not None:
        return exact
    family = next((table.by_family[t] for t in tokens if t in table.by_family), None)
    if family is None:
        return None
    forms = {form for t in tokens if (form := _form(t)) is not None}
    sizes = {float(m) for m in _MEMORY.findall(name.lower().replace("_", " "))}
    for entry in family:  # table order: the family's default comes first
        if forms <= entry.forms and (not sizes or entry.memory_gb in sizes):
            return entry
    return None


def lookup_gpu(name: str, warn: bool = True) -> GpuSpec | None:
    """The spec of a GPU named as drivers, traces, tools or people name it; never a default.

    Matching ignores case, spaces, dashes and underscores and the words NVIDIA, Tesla, AMD and
    Instinct. It accepts the short keys (``"H100-SXM"``, ``"h100 sxm"``, ``"A100-80GB"``, ``"T4"``)
    and the names nvidia-smi, CUDA and profilers report (``"NVIDIA H100 80GB HBM3"``,
    ``"Tesla V100-DGXS-32GB"``, ``"NVIDIA A100-SXM4-40GB"``, ``"NVIDIA A100 80GB PCIe"``,
    ``"NVIDIA B300 SXM6 AC"``, ``"AMD Instinct MI300X"``). The model must appear as a whole word,
    so ``"L4"`` never matches an L40S and ``"H100"`` never matches a GH100. A form factor (SXM,
    PCIe, NVL, DGXS) or a capacity ("80GB") in the name narrows the choice; one the table does
    not have for that model (``"H800 PCIe"``, ``"A100 96GB"``) gives ``None``.

    When the name leaves the variant open, the defaults are:

    - ``"V100"``: V100-SXM2-32GB;
    - ``"A100"``: A100-SXM-80GB; ``"A100 PCIe"``: A100-PCIE-80GB; ``"A100 40GB"``: A100-SXM-40GB;
    - ``"H100"`` and ``"NVIDIA H100"`` (as Kineto traces name it): H100-SXM; so is
      ``"NVIDIA H100 80GB HBM3"`` (nvidia-smi's name for the SXM part);
    - ``"H200"``: H200-SXM.

    Args:
        name: The GPU name.
        warn: Emit :class:`UnknownGpuWarning` when the name is unknown.

    Returns:
        The spec, or ``None`` when the table has no GPU of that name.
    """
    entry = _match(name) if isinstance(name, str) else None
    if entry is not None:
        return entry.spec
    if warn:
        known = ", ".join(e.spec.key for e in _table().entries)
        warnings.warn(
            f"unknown GPU {name!r}: not in badput's hardware table (known: {known}); "
            "no peak FLOP/s or bandwidth is assumed for it",
            UnknownGpuWarning,
            stacklevel=2,
        )
    return None
