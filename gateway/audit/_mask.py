"""Masking of sensitive values before they enter an audit record.

A value is masked when its member name looks sensitive, when it sits at a configured JSON
pointer, or when it is a string that looks like a credential itself. A masked value is
replaced by a keyed digest (HMAC-SHA256), so equal secrets stay correlatable within a trail
without being recoverable by guessing. The raw value is also scrubbed from every other string
in the record (a policy message that echoes it, say).

Member names are matched by *pattern*, not by a list of exact names. A name is first
normalised into words (:func:`normalize_name`: ``"X-API-Key"``, ``"xApiKey"`` and
``"x.api.key"`` all become ``"x_api_key"``), then each pattern of :data:`DEFAULT_NAME_PATTERNS`
is searched in it. The patterns cover a class of names (anything with *password*, *secret*,
*token*, *credential*, *cookie*, *session*, *private*, ... in it, and *key* qualified by *api*,
*access*, *signing*, ...), so unforeseen spellings are masked too. They err on the side of
masking: ``max_tokens``, ``token_count`` or ``private`` (a flag) are masked as well. A bare
``key`` is not (it names the key of a key-value store far more often than a credential).

The OPA decision-log mask policy (``policies/system/log/mask.rego``) carries the same
normalisation and the same default patterns; a test holds the two to one table.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable
from typing import Any, Final

from gateway import _json

#: Key names masked by default, compared case-insensitively without ``-``/``_``. Every one of
#: them is also matched by :data:`DEFAULT_NAME_PATTERNS`; kept for configurations that
#: extend it.
DEFAULT_MASKED_KEYS: Final = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "clientsecret",
        "token",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "apikey",
        "authorization",
        "privatekey",
        "cardnumber",
        "creditcard",
        "cvv",
        "ssn",
    }
)

# Qualifiers that make a "key" a credential: api_key, signing_key, accesskey, ...
_KEY_QUALIFIERS: Final = (
    "api|access|private|secret|signing|sign|encryption|encrypt|decryption|decrypt|master|"
    "client|consumer|app|application|account|service|storage|auth|session|shared|hmac|ssh|"
    "gpg|pgp|rsa|aes|jwt|tls|ssl|webhook|deploy|license|root|admin|crypto|cipher|wrapping|pass|"
    "subscription"
)

#: Patterns searched in a normalised member name (:func:`normalize_name`: lower-case ASCII
#: words joined by ``_``). Written in the regular-expression dialect that Python's ``re`` and
#: RE2 (OPA) read alike: no ``\b``, ``\w``, ``\s``, look-around or back-references, and
#: ``$`` only where no newline can occur. ``(^|_)word(_|$)`` matches a whole word; a bare
#: ``word`` also matches inside one (``dbpassword``, ``accesstoken``).
DEFAULT_NAME_PATTERNS: Final = (
    "pass(word|wd|phrase|code)",
    "(^|_)(pass|pw|pword)(_|$)",
    "pwd",
    "secret",
    "token",
    "credential",
    "(^|_)creds?(_|$)",
    "cookie",
    "bearer",
    "authori[sz]ation",
    "(^|_)(auth|authn)(_|$)",
    "api_?keys?",
    f"({_KEY_QUALIFIERS})_?keys?",
    "private",
    "(^|_)(pem|pkcs|pfx|p_12|keystore|keyfile|key_file|keypair|key_pair|pat)(_|$)",
    "session",
    "signature",
    "(^|_)sig(_|$)",
    "jwt",
    "(^|_)(otp|totp|hotp|mfa|pin|cvv|cvc|ssn)(_|$)",
    "card_?number",
    "credit_?card",
    "(^|_)dsn(_|$)",
    "conn(ection)?_?str(ing)?",
)

#: Patterns searched in every string value, whatever its member name: credentials that carry
#: their own shape (bearer tokens, PEM private keys, JWTs, passwords in URLs, ``name=value``
#: assignments of credentials in free text, well-known token prefixes). A matching string is
#: masked whole. Same dialect as :data:`DEFAULT_NAME_PATTERNS`; every repetition either has a
#: fixed bound or starts after a character it cannot contain, so that no pattern takes more
#: than linear time on any string (Python's ``re`` backtracks).
DEFAULT_VALUE_PATTERNS: Final = (
    r"(?i)bearer[ \t]+[a-z0-9._~+/=-]{8}",
    r"(?i)(password|passwd|pwd|secret|token|api[_-]?key|authorization|cookie|credential)s?"
    r"""["']?[ \t]*[:=]""",
    r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY",
    r"(^|[^A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}[.][A-Za-z0-9_-]{8,}[.]",
    r"://[^/ \t\r\n:@]+:[^/ \t\r\n@]*@",
    r"(AKIA|ASIA)[0-9A-Z]{16}",
    r"(gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{22})",
    r"xox[abposr]-[0-9A-Za-z-]{10}",
    r"(^|[^A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20}",
    r"(sk|rk)_live_[A-Za-z0-9]{16}",
    r"glpat-[A-Za-z0-9_-]{20}",
    r"AIza[0-9A-Za-z_-]{35}",
)

# Python's re searches a value for these patterns at every position, about 225 ns per
# character for all twelve (450 us for 2 KB of arguments, in every record that holds them).
# Each default pattern is searched only where a value holds text that every match of it
# must contain: a substring search costs about 1 ns per character. (A value that passes a
# prefilter is still searched with the pattern itself, so the verdict is the pattern's; a
# test holds every prefilter to its pattern, and any other pattern is always searched.)
_CASELESS_WORDS: Final = (
    "pass",
    "pwd",
    "secret",
    "token",
    "api",
    "authorization",
    "cookie",
    "credential",
)
# The four characters that (?i) in Python's re matches to ASCII letters besides the letters
# themselves (re's documentation; a test checks every code point): with them replaced,
# lower() puts every caseless match of an ASCII word in the value's folded form.
_CASELESS_ASCII: Final = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"), ("\u212a", "k"))


def _folded(value: str) -> str:
    # str.replace only scans a value without the character (str.translate would cost about
    # 60 ns per character of any non-ASCII value).
    if not value.isascii():
        for char, letter in _CASELESS_ASCII:
            value = value.replace(char, letter)
    return value.lower()


#: What every match of each default value pattern contains: texts (any one of them), or a test
#: of the value and its folded form (``_folded``) for the caseless ones.
_PREFILTERS: Final[dict[str, Callable[[str, str], bool] | tuple[str, ...]]] = {
    DEFAULT_VALUE_PATTERNS[0]: lambda value, folded: "bearer" in folded,
    DEFAULT_VALUE_PATTERNS[1]: lambda value, folded: (
        (":" in value or "=" in value) and any(word in folded for word in _CASELESS_WORDS)
    ),
    DEFAULT_VALUE_PATTERNS[2]: ("-----BEGIN",),
    DEFAULT_VALUE_PATTERNS[3]: ("eyJ",),
    DEFAULT_VALUE_PATTERNS[4]: ("://",),
    DEFAULT_VALUE_PATTERNS[5]: ("AKIA", "ASIA"),
    DEFAULT_VALUE_PATTERNS[6]: ("gh", "github_pat_"),
    DEFAULT_VALUE_PATTERNS[7]: ("xox",),
    DEFAULT_VALUE_PATTERNS[8]: ("sk-",),
    DEFAULT_VALUE_PATTERNS[9]: ("_live_",),
    DEFAULT_VALUE_PATTERNS[10]: ("glpat-",),
    DEFAULT_VALUE_PATTERNS[11]: ("AIza",),
}


class _ValuePatterns:
    """Value patterns searched as one alternation would be, each only past its prefilter."""

    __slots__ = ("_caseless", "_literal", "_rest")

    def __init__(self, texts: list[str]) -> None:
        literal: list[tuple[str, re.Pattern[str]]] = []
        caseless: list[tuple[Callable[[str, str], bool], re.Pattern[str]]] = []
        rest: list[str] = []
        for text in dict.fromkeys(texts):
            prefilter = _PREFILTERS.get(text)
            if prefilter is None:
                rest.append(text)
            elif isinstance(prefilter, tuple):
                pattern = re.compile(text)
                literal.extend((needle, pattern) for needle in prefilter)
            else:
                caseless.append((prefilter, re.compile(text)))
        self._literal = tuple(literal)
        self._caseless = tuple(caseless)
        self._rest = _pattern(rest, "value")

    def search(self, value: str) -> bool:
        # One entry per text a match contains: a pattern with two is searched at most twice.
        for needle, pattern in self._literal:
            if needle in value and pattern.search(value) is not None:
                return True
        if self._caseless:
            folded = _folded(value)
            for prefilter, pattern in self._caseless:
                if prefilter(value, folded) and pattern.search(value) is not None:
                    return True
        return self._rest is not None and self._rest.search(value) is not None


#: A member name longer than this is masked without being matched: no credential needs such
#: a name, and matching it would cost time in proportion to its length on every record.
MAX_NAME_LENGTH: Final = 256

_NORMALIZE: Final = re.compile(r"[^a-z0-9]")
_MIN_SCRUB: Final = 4
# How a string masked for its shape is cut into pieces, and the shortest piece scrubbed.
_PIECES: Final = re.compile(r"""[ \t\r\n"'=:,;]+""")
_MIN_PIECE: Final = 8
# How many member names a masker remembers its verdict on. Records repeat the same few names
# (a caller context's, an argument schema's); a full memo starts over, so names made up by
# callers cost at most the memo's size.
_NAME_MEMO: Final = 4096
# Likewise for string values up to this length found innocent: records repeat tool names,
# subjects, roles, revisions, engines and policy messages (a look-up costs a tenth of the
# search); ids that are new every time take a place until the memo starts over. Only values
# that the records keep in clear anyway are remembered: a masked one is never held here.
_VALUE_MEMO: Final = 4096
_MEMO_VALUE_LENGTH: Final = 256


def _normalize(key: str) -> str:
    return _NORMALIZE.sub("", key.lower())


# Word boundaries inside a run of letters and digits. Zero-width look-around keeps this linear
# in Python's backtracking engine; the policy writes the same boundaries as four RE2
# replacements (RE2 has no look-around), and a test holds the two forms to each other.
_BOUNDARY: Final = re.compile(
    r"(?<=[A-Z])(?=[A-Z][a-z])|(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])"
)
_SEPARATORS: Final = re.compile(r"[^A-Za-z0-9]+")


def normalize_name(name: str) -> str:
    """A member name as lower-case ASCII words joined by ``_``.

    Words end at every character that is not an ASCII letter or digit, between a lower-case
    and an upper-case letter (``apiKey``), before the last capital of a run followed by a
    lower-case letter (``APIKey`` -> ``api_key``), and between letters and digits
    (``oauth2Token`` -> ``oauth_2_token``). Linear in the length of ``name``.
    """
    return _SEPARATORS.sub("_", _BOUNDARY.sub("_", name)).lower().strip("_")


def _pattern(patterns: Iterable[str], what: str) -> re.Pattern[str] | None:
    texts = list(patterns)
    for text in texts:
        try:
            re.compile(text)
        except re.error as exc:
            raise ValueError(f"invalid {what} pattern {text!r}: {exc}") from None
    if not texts:
        return None
    # Each pattern in its own group: the inline (?i) of one must not reach another.
    return re.compile("|".join(f"(?:{_scoped(text)})" for text in texts))


def _scoped(text: str) -> str:
    # A leading global flag group such as (?i) is only allowed at the very start of a
    # Python pattern; inside the alternation it becomes the scoped form (?i:...).
    match = re.match(r"\(\?([aiLmsux]+)\)", text)
    if match is None:
        return text
    return f"(?{match.group(1)}:{text[match.end() :]})"


def _pointer(text: str) -> tuple[str, ...]:
    if text == "":
        return ()
    if not text.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {text!r}")
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/"))


class Masker:
    """Replaces sensitive values with ``"masked:<digest>"``.

    Args:
        keys: member names to mask wherever they occur, compared case-insensitively without
            separators (default :data:`DEFAULT_MASKED_KEYS`).
        patterns: regular expressions searched in every normalised member name
            (:func:`normalize_name`); a match masks the member's whole value (default
            :data:`DEFAULT_NAME_PATTERNS`).
        values: regular expressions searched in every string value; a match masks that
            string (default :data:`DEFAULT_VALUE_PATTERNS`).
        pointers: JSON pointers (RFC 6901) of further values to mask, relative to the
            document being masked (``/card/number``).
        key: the HMAC key; a random one per process when omitted.

    Raises:
        ValueError: a pointer does not start with ``/``, or a pattern does not compile.
    """

    def __init__(
        self,
        *,
        keys: Iterable[str] = DEFAULT_MASKED_KEYS,
        patterns: Iterable[str] = DEFAULT_NAME_PATTERNS,
        values: Iterable[str] = DEFAULT_VALUE_PATTERNS,
        pointers: Iterable[str] = (),
        key: bytes | None = None,
    ) -> None:
        self._keys = frozenset(_normalize(name) for name in keys)
        self._names = _pattern(patterns, "name")
        texts = list(values)
        self._values = _ValuePatterns(texts) if texts else None
        self._pointers = tuple(_pointer(pointer) for pointer in pointers)
        self._key = key if key is not None else secrets.token_bytes(32)
        # The verdict on a name depends on the name alone: matching the name patterns costs
        # several microseconds, a dictionary look-up a tenth of one.
        self._name_verdicts: dict[str, bool] = {}
        self._innocent_values: set[str] = set()

    def sensitive_name(self, name: str) -> bool:
        """Whether a member called ``name`` has its value masked wherever it occurs."""
        if len(name) > MAX_NAME_LENGTH:
            return True
        verdicts = self._name_verdicts
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = _normalize(name) in self._keys or (
                self._names is not None and self._names.search(normalize_name(name)) is not None
            )
            if len(verdicts) >= _NAME_MEMO:
                verdicts.clear()
            verdicts[name] = verdict
        return verdict

    def sensitive_value(self, value: str) -> bool:
        """Whether a string looks like a credential by itself (masked whatever its name)."""
        patterns = self._values
        if patterns is None:
            return False
        if len(value) > _MEMO_VALUE_LENGTH:
            return patterns.search(value)
        innocent = self._innocent_values
        if value in innocent:
            return False
        if patterns.search(value):
            return True
        if len(innocent) >= _VALUE_MEMO:
            innocent.clear()
        innocent.add(value)
        return False

    def digest(self, value: Any) -> str:
        """The replacement text for one value (a non-string by its canonical JSON)."""
        if isinstance(value, str):
            text = value
        else:
            # Canonical JSON, so that equal objects give equal digests whatever their
            # member order; repr() only for values that are not JSON.
            try:
                text = _json.canonical(value).decode("utf-8")
            except (_json.StrictJSONError, UnicodeError):
                text = repr(value)
        mac = hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return "masked:" + mac.hexdigest()[:24]

    def mask(self, document: Any, found: list[str] | None = None) -> Any:
        """A masked copy of ``document``; raw masked strings are appended to ``found``."""
        sink = found if found is not None else []
        return self._walk(document, (), sink)

    def _walk(self, node: Any, path: tuple[str, ...], found: list[str]) -> Any:
        if path and path in self._pointers:
            return self._replace(node, found)
        if isinstance(node, dict):
            result = {}
            for name, value in node.items():
                if isinstance(name, str) and self.sensitive_name(name):
                    result[name] = self._replace(value, found)
                else:
                    result[name] = self._walk(value, (*path, str(name)), found)
            return result
        if isinstance(node, list):
            return [self._walk(item, (*path, str(index)), found) for index, item in enumerate(node)]
        if isinstance(node, str) and self.sensitive_value(node):
            return self._replace(node, found)
        return node

    def _replace(self, value: Any, found: list[str]) -> str:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                found.append(item)
                if self.sensitive_value(item):
                    # The credential inside the text may be echoed without its surroundings
                    # (the token of "Bearer <token>"): its credential-sized pieces go too.
                    found.extend(p for p in _PIECES.split(item) if len(p) >= _MIN_PIECE)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif item is not None and not isinstance(item, bool):
                found.append(str(item))
        return self.digest(value)

    @staticmethod
    def scrub(record: Any, secrets_found: Iterable[str]) -> Any:
        """Remove every occurrence of the given raw values from all strings in ``record``."""
        needles = sorted({s for s in secrets_found if len(s) >= _MIN_SCRUB}, key=len, reverse=True)
        if not needles:
            return record

        def clean(node: Any) -> Any:
            if isinstance(node, str):
                for needle in needles:
                    if needle in node:
                        node = node.replace(needle, "[masked]")
                return node
            if isinstance(node, dict):
                return {clean(k): clean(v) for k, v in node.items()}
            if isinstance(node, list):
                return [clean(item) for item in node]
            return node

        return clean(record)
