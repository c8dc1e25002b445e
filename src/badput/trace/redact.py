r"""Secrets that a trace carries never reach badput's output: the one redaction mechanism.

Traces hold what the recording machine knew: its environment (`HF_TOKEN`,
`AWS_SECRET_ACCESS_KEY`, `DB_PASSWORD`, ...) as a dict, as `K=V` strings or as
`{name, value}` lists, launcher arguments, URLs with a password in them. Whatever badput
writes (reports in every format, error and warning lines, the annotated copy of a trace)
passes through this module, and a secret value is replaced by `REDACTED` (`"<redacted>"`);
the key stays, so that a reader still sees which variable was set.

What is a secret:

- A value under a secret-looking key (`is_secret_key`), in a dict, in a `KEY=VALUE` or
  `KEY: VALUE` string, or in a `{"name": KEY, "value": ...}` / `{"key": KEY, "value": ...}`
  entry. Keys are split into words (`_`, `-`, `.`, camelCase) and matched case-insensitively:
  any word containing `secret`, `passw`, `passphrase` or `credential`; any word `auth`,
  `authorization`, `oauth`, `bearer`, `cookie`, `jwt`, `webhook`, `creds`; a last word ending
  in `token` (`HF_TOKEN`, `authToken`; not `TOKENIZERS_PARALLELISM`, `max_tokens`); a last word
  `key` after another word (`OPENAI_API_KEY`, `SSH_KEY`; not `key` alone, the name field of a
  `{key, value}` entry, and not `KEY_COLUMN`, `sort_key`, `public_key`); the word pairs
  `api key`, `access key`, `private key`, `secret key`, `connection string`; a last word
  `pass`, `pwd` or `pw` after another word (`DB_PASS`, `MYSQL_PWD`; not `PWD`, the working
  directory), `dsn` or `signature`. Trailing qualifiers (`_VALUE`, `_STR`, `_B64`, ...) are
  looked through. `None`, booleans, empty strings and values already masked (`REDACTED`,
  `***`) are kept: they carry no secret.
- A value that looks like a well-known credential, anywhere (a key of any name, a free text,
  an event name): Hugging Face (`hf_` and 30+ letters), OpenAI/Anthropic (`sk-` and 20+
  characters with a digit and a capital: `sk-proj-...`, `sk-ant-...`), GitHub (`ghp_`,
  `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), Slack (`xoxb-`, `xoxp-`, ...), AWS access
  key ids (`AKIA...`, `ASIA...`; a secret access key has no format of its own and is caught
  by its key, `AWS_SECRET_ACCESS_KEY`), JSON web tokens (`eyJ...`.`eyJ...`), PEM private key
  blocks, and the password (or a bare token of 16+ characters as the user) of a URL's user
  info (`https://user:<redacted>@host`). Only the matched part of a text is replaced. In
  free text (`redact_text`) the key rules apply too: `KEY=VALUE`, `KEY: VALUE`,
  `"KEY": "VALUE"` and `--key=value` lose the value when KEY is secret (`==` pins, `::`
  scopes and `://` are not assignments), and so does the credential after `Bearer`.

Where it applies, one place per output path:

- Everything `analyze`, `report` and `diff` print (text, JSON, Markdown, HTML) is built
  from a Trace; `badput.trace.load.load_trace` returns every Trace through `redact_trace`
  (event names, thread labels, GPU names, the reader's warnings, NCCL metadata strings,
  the JSON texts of the ops' shape arguments) and every `TraceFormatError` through
  `redact_error`, so renderers get clean strings.
- `annotate` (`badput.report.perfetto.write_annotated`) passes each top-level metadata value
  through `redact_json` and the original events through `redact_events`.
- CLI error and warning lines (`badput.cli.app`, `badput.cli.jobs.warn`) go through
  `redact_text` as a last net for anything that names a path or echoes input.
- `badput doctor` decides which environment variables to mask with `is_secret_key`.

Cost: every check first looks for short probes (`hf_`, `://`, `eyJ`, and for the key rules the
lower-case words `token`, `key`, `pass`, ...) and runs the full patterns only on a text that
holds one. JSON text is decoded only when a probe (or a `\u`/`\/` escape, which could spell
one) is in it. The original events of `annotate` get the credential formats only (see
`redact_events`): nine case-sensitive probes per piece of the file, no per-event work unless
one hits.
"""

from __future__ import annotations

import dataclasses
import decimal
import itertools
import re
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, cast

import msgspec

from badput.errors import TraceFormatError

if TYPE_CHECKING:
    from badput.trace.model import Trace

__all__ = [
    "REDACTED",
    "is_secret_key",
    "may_hold_secret",
    "redact_error",
    "redact_events",
    "redact_json",
    "redact_metadata",
    "redact_text",
    "redact_trace",
    "redact_value",
]

#: What a secret value is replaced by.
REDACTED = "<redacted>"

# ---- secret-looking keys --------------------------------------------------------------------

# Words of a key: runs of capitals (an acronym), a capitalised or lower-case word, digits.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SUBSTRINGS = ("secret", "passw", "passphrase", "credential")
_ANY_WORD = frozenset(
    {"auth", "authorization", "oauth", "authn", "authz", "bearer", "cookie", "cookies"}
    | {"jwt", "webhook", "webhooks", "creds"}
)
_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("connection", "string"),
        ("conn", "str"),
    }
)
# Compound words that end in "key" and name a secret.
_KEY_COMPOUNDS = ("apikey", "accesskey", "privatekey", "secretkey", "signingkey", "masterkey")
# "X_KEY" is a program's lookup key rather than a secret after these words.
_PLAIN_KEY_BEFORE = frozenset(
    {"public", "sort", "primary", "foreign", "partition", "cache", "hash", "lookup", "group"}
    | {"shard", "index", "row", "column", "unique", "routing", "dict", "map", "join", "order"}
    | {"metric", "sharding", "cluster", "dedup", "composite"}
)
# Last words that name a secret only after another word: `PWD` alone is the working directory.
_LAST_AFTER_ANOTHER = frozenset({"pass", "pwd", "pw"})
_LAST_ANY = frozenset({"dsn", "signature"})
# Trailing words that qualify rather than name: `HF_TOKEN_VALUE` is a token.
_QUALIFIERS = frozenset(
    {"value", "val", "str", "string", "raw", "b64", "base64", "hex", "data", "text", "plain"}
)

# Lower-case needles: a key none of them is in is not secret, whatever the rules above say.
# `may_hold_secret` looks for the same needles, so a JSON text it passes over can hold no
# secret key.
_KEY_NEEDLES = (
    "token", "secret", "pass", "pw", "key", "auth", "cred", "cookie", "bearer", "dsn",
    "signature", "jwt", "webhook", "conn",
)  # fmt: skip


def is_secret_key(key: str) -> bool:
    """Whether values under `key` are secret (the rules are in the module docstring).

    Args:
        key: a dict key, an environment variable name, a `--flag` name.

    Example:
        >>> is_secret_key("HF_TOKEN"), is_secret_key("OPENAI_API_KEY")
        (True, True)
        >>> is_secret_key("TOKENIZERS_PARALLELISM"), is_secret_key("KEY_COLUMN")
        (False, False)
    """
    # Keys repeat (every event's args, every env list): remember the short ones, never a
    # hostile trace's megabyte-long ones.
    return _cached_secret_key(key) if len(key) <= 256 else _secret_key(key)


def _secret_key(key: str) -> bool:
    """`is_secret_key`, uncached."""
    low = key.lower()
    if not any(n in low for n in _KEY_NEEDLES):
        return False
    words = [w.lower() for w in _WORD.findall(key)]
    if not words:
        return False
    for w in words:
        if w in _ANY_WORD or any(s in w for s in _SUBSTRINGS):
            return True
        if any(w.endswith(c) for c in _KEY_COMPOUNDS):
            return True
    if any(pair in _PAIRS for pair in itertools.pairwise(words)):
        return True
    n = len(words)
    while n > 1 and words[n - 1] in _QUALIFIERS:
        n -= 1
    last = words[n - 1]
    if last.endswith("token") or last in _LAST_ANY:
        return True
    if n > 1 and last in _LAST_AFTER_ANOTHER:
        return True
    return n > 1 and last == "key" and words[n - 2] not in _PLAIN_KEY_BEFORE


_cached_secret_key = lru_cache(maxsize=8192)(_secret_key)


def _is_masked(text: str) -> bool:
    """An empty value, or one masked already (`REDACTED`, `<redacted>`, `***`)."""
    t = text.strip().strip("<>[]()\"'").lower()
    return t in ("", "redacted") or set(t) == {"*"}


def redact_value(value: object) -> object:
    """The value to show for `value` under a secret key.

    `None`, booleans, empty strings and already-masked values stay (no secret in them);
    anything else, containers included, becomes `REDACTED`.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and _is_masked(value):
        return value
    return REDACTED


# ---- secret-looking values in text ----------------------------------------------------------

_TOKEN_CHARS = r"A-Za-z0-9_\-"


def _url_userinfo(m: re.Match[str]) -> str:
    user, sep, _ = m.group(0).partition(":")
    return f"{user}:{REDACTED}" if sep else REDACTED


@dataclasses.dataclass(frozen=True)
class _Format:
    """A credential format: `pattern` is tried only on a text that `probe` is found in.

    A probe is a literal, or a short pattern with a literal prefix, which `re` searches fast.
    """

    probe: str
    pattern: str
    flags: int = 0

    def compile(self) -> tuple[re.Pattern[str], re.Pattern[bytes], re.Pattern[str]]:
        """The probe (for text and for bytes) and the pattern, compiled."""
        return (
            re.compile(self.probe),
            re.compile(self.probe.encode()),
            re.compile(self.pattern, self.flags),
        )


_FORMATS = (
    _Format("hf_", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    # OpenAI (sk-..., sk-proj-...), Anthropic (sk-ant-...): random, so with a digit and a
    # capital; "sk-learn-experiment-2024" is not one.
    _Format(
        "sk-",
        rf"(?<![{_TOKEN_CHARS}])sk-(?=[{_TOKEN_CHARS}]*[0-9])(?=[{_TOKEN_CHARS}]*[A-Z])"
        rf"[{_TOKEN_CHARS}]{{20,}}",
    ),
    _Format("gh[pousr]_", r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}"),
    _Format("github_pat_", r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{30,}"),
    _Format("A[KS]IA", r"(?<![A-Za-z0-9])A[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])"),
    _Format("xox[abprs]-", r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9\-]{10,}"),
    _Format(
        "eyJ",
        rf"(?<![{_TOKEN_CHARS}])eyJ[{_TOKEN_CHARS}]{{8,}}\.eyJ[{_TOKEN_CHARS}]{{8,}}"
        rf"(?:\.[{_TOKEN_CHARS}]*)?",
    ),
    # A PEM block up to its END line, or to the end of the text when that is cut off.
    _Format(
        "PRIVATE KEY",
        r"-----BEGIN[A-Z ]*PRIVATE KEY-----(?:.*?-----END[A-Z ]*PRIVATE KEY-----|.*)",
        re.DOTALL,
    ),
    # user:password@ (the user stays), or a bare token as the user (16+ characters).
    _Format(
        "://",
        r"(?<=://)(?:[^\s/?#@:\"'<>\\]*:[^\s/?#@\"'<>\\]+|[A-Za-z0-9_.~%\-]{16,})(?=@)",
    ),
)
_COMPILED = tuple(f.compile() for f in _FORMATS)
_URL_RULE = _COMPILED[-1][2]
_PEM_RULE = _COMPILED[-2][2]

# KEY=VALUE, KEY: VALUE, "KEY": "VALUE", --key=value; a secret KEY's value is replaced.
# `==` (pip pins), `::` (C++ scopes) and `://` are not assignments.
_ASSIGN = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<key>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)(?P<kq>[\"']?)"
    r"(?P<sep>[ \t]*(?:=(?!=)|:(?![:/]))[ \t]*)"
    r"(?:(?P<q>[\"'])(?P<qv>.*?)(?P=q)"
    r"|(?P<scheme>(?i:bearer|basic|token|digest)[ \t]+)?(?P<v>[^\s\"',;&]+))"
)
# Texts up to this length get the key rules in one pass; in longer ones they are tried where
# a secret key (up to `_KEY_CHARS` of it before its secret word) stands before a separator.
_WHOLE_TEXT_CHARS = 64 << 10
_KEY_CHARS = 256
_KEY_TAIL = re.compile(r"[A-Za-z0-9_.\-]*")
_KEY_HEAD = re.compile(r"[A-Za-z0-9_.\-]*\Z")  # searched in text[i - _KEY_CHARS : i]
_KEY_START = re.compile(r"-{0,2}[A-Za-z_]")
_SEPARATOR = re.compile(r"[\"']?[ \t]*(?:=(?!=)|:(?![:/]))")
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer[ \t]+)[A-Za-z0-9._~+/=\-]{8,}")


def _assignment(m: re.Match[str]) -> str:
    if not is_secret_key(m.group("key").lstrip("-")):
        return m.group(0)
    quote = m.group("q")
    value = m.group("qv") if quote else m.group("v")
    if _is_masked(value):
        return m.group(0)
    head = m.group("key") + m.group("kq") + m.group("sep")
    if quote:
        return f"{head}{quote}{REDACTED}{quote}"
    return f"{head}{m.group('scheme') or ''}{REDACTED}"


def _redact_formats(text: str) -> str:
    """`text` with the credential formats (not the key rules) replaced."""
    out = text
    for probe, _, pattern in _COMPILED:
        if not probe.search(out):
            continue
        replace = _url_userinfo if pattern is _URL_RULE else (lambda _: REDACTED)
        if len(out) <= _WHOLE_TEXT_CHARS:
            out = pattern.sub(replace, out)
            continue
        # A long text: the pattern tried only where its probe is (a sub would try it at every
        # position of a 10 MB name).
        parts: list[str] = []
        done = 0
        for hit in probe.finditer(out):
            m = pattern.match(out, _anchor(out, hit, pattern))
            if m and m.start() >= done:
                parts += [out[done : m.start()], replace(m)]
                done = m.end()
        out = "".join([*parts, out[done:]])
    return out


def _anchor(text: str, hit: re.Match[str], pattern: re.Pattern[str]) -> int:
    """Where `pattern` starts for a probe `hit`: at it, after `://`, or at the PEM header."""
    if pattern is _URL_RULE:
        return hit.end()
    if pattern is _PEM_RULE:
        begin = text.rfind("-----BEGIN", max(0, hit.start() - _KEY_CHARS), hit.start())
        return begin if begin >= 0 else hit.start()
    return hit.start()


def redact_text(text: str) -> str:
    """`text` with every secret-looking part replaced by `REDACTED`.

    For free text: event names, error messages, warnings, metadata strings. Credential
    formats are replaced wherever they are; `KEY=VALUE`, `KEY: VALUE` and `"KEY": "VALUE"`
    lose the value when KEY is secret (`is_secret_key`); so does the credential after
    `Bearer`.

    Example:
        >>> redact_text("HF_TOKEN=abc123 CUDA_VISIBLE_DEVICES=0")
        'HF_TOKEN=<redacted> CUDA_VISIBLE_DEVICES=0'
        >>> redact_text("git clone https://bob:hunter2@example.com/x.git")
        'git clone https://bob:<redacted>@example.com/x.git'
    """
    out = _redact_formats(text)
    low = out.lower()
    if not any(n in low for n in _KEY_NEEDLES):
        return out
    if len(out) <= _WHOLE_TEXT_CHARS:
        return _redact_keys(out, "bearer" in low)
    # A long text (a 10 MB kernel name): the key rules only where a secret key stands before
    # a separator, so that the cost follows the keys, not the length (the assignment regex
    # would be tried at every position).
    parts: list[str] = []
    done = 0
    for lo, hi, replacement in _secret_assignments(out, low):
        if lo >= done:
            parts += [out[done:lo], replacement]
            done = hi
    return "".join([*parts, out[done:]])


def _redact_keys(text: str, bearer: bool) -> str:
    out = _ASSIGN.sub(_assignment, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, out) if bearer else out


def _secret_assignments(text: str, low: str) -> list[tuple[int, int, str]]:
    """`(start, end, replacement)` of each secret assignment and bearer credential, in order."""
    found: list[tuple[int, int, str]] = []
    for needle in _KEY_NEEDLES:
        i = low.find(needle)
        while i >= 0:
            tail = _KEY_TAIL.match(text, i)
            hi = tail.end() if tail else i + len(needle)
            if needle == "bearer":
                m = _BEARER.match(text, i)
                if m:
                    found.append((m.start(), m.end(), m.group(1) + REDACTED))
            elif _SEPARATOR.match(text, hi):  # cheap first: most hits stand before none
                head = _KEY_HEAD.search(text, max(0, i - _KEY_CHARS), i)
                lo = head.start() if head else i
                if not is_secret_key(text[lo:hi].lstrip("-")):
                    i = low.find(needle, max(hi, i + 1))
                    continue
                start = _KEY_START.search(text, lo, hi)
                m = _ASSIGN.match(text, start.start()) if start else None
                if m:
                    found.append((m.start(), m.end(), _assignment(m)))
            i = low.find(needle, max(hi, i + 1))
    return sorted(found)


# ---- decoded JSON values --------------------------------------------------------------------

_PAIR_NAME_KEYS = ("name", "key", "Name", "Key", "NAME", "KEY")
_PAIR_VALUE_KEYS = frozenset({"value", "Value", "VALUE"})


def _secret_pair(entry: dict[object, object]) -> bool:
    """Whether `entry` is `{"name": KEY, "value": ...}` (or `key`/`value`) with a secret KEY."""
    if not _PAIR_VALUE_KEYS.intersection(entry):
        return False
    for k in _PAIR_NAME_KEYS:
        name = entry.get(k)
        if isinstance(name, str) and is_secret_key(name):
            return True
    return False


def _redact_tree(root: object, keys: bool = True) -> tuple[object, bool]:
    """A redacted copy of a decoded JSON value, and whether anything changed.

    With `keys` False only the credential formats are replaced (the key rules are off).
    Iterative (an explicit stack), so no depth of nesting raises RecursionError.
    """
    text: Callable[[str], str] = redact_text if keys else _redact_formats
    changed = False
    box: dict[object, object] = {}
    # (dict or list of the result, its slot, the source value, whether a secret's value)
    stack: list[tuple[dict[object, object] | list[object], object, object, bool]] = [
        (box, None, root, False)
    ]
    while stack:
        parent, slot, value, secret = stack.pop()
        new: object
        if secret:
            new = redact_value(value)
            changed = changed or new is not value
        elif isinstance(value, dict):
            entries: dict[object, object] = {}
            pair = keys and _secret_pair(value)
            for k, v in value.items():
                nk = text(k) if isinstance(k, str) else k
                changed = changed or nk != k
                hidden = (
                    keys
                    and isinstance(k, str)
                    and (is_secret_key(k) or (pair and k in _PAIR_VALUE_KEYS))
                )
                entries[nk] = None  # the slot keeps the key's place in the order
                stack.append((entries, nk, v, hidden))
            new = entries
        elif isinstance(value, list | tuple):
            items: list[object] = [None] * len(value)
            stack.extend((items, i, v, False) for i, v in enumerate(value))
            new = items
        elif isinstance(value, str):
            new = text(value)
            changed = changed or new != value
        else:
            new = value
        if isinstance(parent, list):
            parent[cast(int, slot)] = new
        else:
            parent[slot] = new
    return box[None], changed


def redact_metadata(value: object) -> object:
    """A copy of a decoded JSON value (dicts, lists, scalars) with its secrets replaced.

    Dict keys that are secret (`is_secret_key`) keep their key and lose their value; so do
    `{"name": KEY, "value": ...}` entries; every string (keys too) goes through `redact_text`,
    which also covers the `K=V` strings of an `envs` list. Tuples come back as lists. Nesting
    depth is unbounded (no recursion).

    Example:
        >>> redact_metadata({"environment": {"HF_TOKEN": "x1", "PATH": "/bin"}})
        {'environment': {'HF_TOKEN': '<redacted>', 'PATH': '/bin'}}
    """
    return _redact_tree(value)[0]


# ---- JSON text ------------------------------------------------------------------------------

# Floats decode to Decimal and encode as numbers, so that a value that is rewritten keeps
# the digits of its numbers (a trace's microsecond times do not survive float64).
_DECODER = msgspec.json.Decoder(float_hook=decimal.Decimal)
_ENCODER = msgspec.json.Encoder(decimal_format="number")
_KEY_NEEDLES_B = tuple(n.encode() for n in _KEY_NEEDLES)
_PROBES_B = tuple(probe for _, probe, _ in _COMPILED)
_REDACTED_JSON = msgspec.json.encode(REDACTED)


def may_hold_secret(text: bytes | bytearray, keys: bool = True) -> bool:
    r"""Whether JSON text may hold something `redact_json` would change.

    False is a guarantee: no probe of a credential format is in the text, nor (with `keys`)
    a word that a secret key needs, nor a `\u` or `\/` escape that could spell one. A fast
    test (substring searches) for deciding what to decode.

    Args:
        text: JSON text.
        keys: also look for the words of secret keys (the case-insensitive part, which costs
            a lower-cased copy of the text).
    """
    return _suspect(text, 0, len(text), keys)


def _suspect(data: bytes | bytearray, lo: int, hi: int, keys: bool) -> bool:
    """`may_hold_secret` of `data[lo:hi]`, without copying it (unless `keys`)."""
    if data.find(b"\\", lo, hi) >= 0 and (
        data.find(b"\\u", lo, hi) >= 0 or data.find(b"\\/", lo, hi) >= 0
    ):
        return True
    if any(probe.search(data, lo, hi) for probe in _PROBES_B):
        return True
    if keys:
        low = data[lo:hi].lower()
        return any(n in low for n in _KEY_NEEDLES_B)
    return False


def redact_json(
    text: bytes | bytearray | memoryview, key: str | None = None, *, keys: bool = True
) -> bytes:
    """JSON text with its secrets replaced (`redact_metadata`); the same text if none.

    Args:
        text: one JSON value.
        key: the key it is the value of, if any: a secret key (`is_secret_key`) hides the
            whole value.
        keys: apply the key rules; False replaces only the credential formats.

    Returns:
        `text` itself, byte for byte, when nothing is secret; else the value re-encoded
        (compact, numbers with all their digits). A value nested too deeply to decode is
        replaced whole: it cannot be checked.

    Raises:
        msgspec.DecodeError: `text` is not JSON.
    """
    raw = text if isinstance(text, bytes) else bytes(text)
    secret_key = keys and key is not None and is_secret_key(key)
    if not secret_key and not may_hold_secret(raw, keys):
        return raw
    try:
        value = _DECODER.decode(raw)
    except RecursionError:
        return _REDACTED_JSON
    if secret_key:
        hidden = redact_value(value)
        return raw if hidden is value else _ENCODER.encode(hidden)
    new, changed = _redact_tree(value, keys)
    if not changed:
        return raw
    try:
        return _ENCODER.encode(new)
    except RecursionError:
        return _REDACTED_JSON


def redact_events(array: bytes | bytearray, end: int | None = None) -> tuple[bytes | None, int]:
    """The elements of the JSON array `array[:end]` with the credential formats replaced.

    Only the credential formats are replaced (`redact_text` without the key rules): events
    are many, and the formats need a few case-sensitive probes per piece, where the key rules
    need a lower-cased copy and a dozen more searches. The array is decoded into raw elements
    (which also checks that it is one); only the elements that a probe is in are decoded
    further, and re-encoded only when something changed. Nothing is copied when nothing
    changes.

    Args:
        array: holds the array's text, from its "[" at index 0.
        end: where the text ends (after its "]"); default the end of `array`.

    Returns:
        `(None, n)` when no element changed (the caller writes its own text), else the
        elements' new text, comma-separated and without the brackets, and n; n is the number
        of elements.

    Raises:
        msgspec.DecodeError: the text is not a JSON array (nor one nested so deep that it
            cannot be decoded).
    """
    hi = len(array) if end is None else end
    with memoryview(array) as view:
        try:
            items = msgspec.json.decode(view[:hi], type=list[msgspec.Raw])
        except RecursionError:
            raise msgspec.DecodeError("JSON nested too deeply") from None
        n = len(items)
        if not _suspect(array, 1, hi - 1, keys=False):
            return None, n
        texts = [bytes(item) for item in items]
        del items  # the raw elements point into `array`: let it be resized again
    out = [redact_json(t, keys=False) if may_hold_secret(t, keys=False) else t for t in texts]
    if all(a is b for a, b in zip(out, texts, strict=True)):
        return None, n
    return b",".join(out), n


# ---- traces ---------------------------------------------------------------------------------


def _redact_strings(strings: list[str]) -> list[str] | None:
    """The strings redacted, or None when none changed (the caller keeps its list)."""
    out = [redact_text(s) for s in strings]
    return None if out == strings else out


def _redact_json_values(values: list[bytes]) -> list[bytes] | None:
    """JSON texts redacted (`redact_json`), or None when none changed (the caller keeps its list).

    A text that is not JSON (the reader keeps raw texts undecoded) cannot be checked and
    becomes `null`.
    """
    out: list[bytes] = []
    changed = False
    for text in values:
        try:
            new = redact_json(text)
        except msgspec.DecodeError:
            new = b"null"
        changed = changed or new is not text
        out.append(new)
    return out if changed else None


def redact_trace(trace: Trace) -> Trace:
    """The trace with every string it carries redacted; the trace itself when none changes.

    Names are interned, so this is one `redact_text` per distinct name, label and warning,
    not per event; the shape arguments (`Trace.op_args`) are one `redact_json` per distinct
    text. A redacted name keeps its id: rows are grouped by id, never by text.
    """
    changes: dict[str, object] = {}
    for attr in ("names", "labels", "warnings"):
        new = _redact_strings(getattr(trace, attr))
        if new is not None:
            changes[attr] = new
    gpu_names = {k: redact_text(v) for k, v in trace.gpu_names.items()}
    if gpu_names != trace.gpu_names:
        changes["gpu_names"] = gpu_names
    versions = {k: redact_text(v) for k, v in trace.versions.items()}
    if versions != trace.versions:
        changes["versions"] = versions
    meta = trace.comm_meta
    if meta is not None:
        strings = _redact_strings(meta.strings)
        if strings is not None:
            changes["comm_meta"] = dataclasses.replace(meta, strings=strings)
    ops = trace.op_args
    if ops is not None:
        values = _redact_json_values(ops.values)
        if values is not None:
            changes["op_args"] = dataclasses.replace(ops, values=values)
    return dataclasses.replace(trace, **changes) if changes else trace  # type: ignore[arg-type]


def redact_error(error: TraceFormatError) -> TraceFormatError:
    """The error with its path and problem redacted; the error itself when neither changes.

    A reader's problem text may quote what it read (an event name, say).
    """
    path, problem = redact_text(error.path), redact_text(error.problem)
    if path == error.path and problem == error.problem:
        return error
    return TraceFormatError(path, problem)
