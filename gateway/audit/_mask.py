"""Masking of sensitive values before they enter an audit record.

A value is masked when its member name looks sensitive, when it sits at a configured JSON
pointer, or when it is a string that looks like a credential itself. A masked value is
replaced by a keyed digest (HMAC-SHA256), so equal secrets stay correlatable within a trail
without being recoverable by guessing. A member *name* that looks like a credential itself
(``{"AKIA...": 1}``) is replaced by its digest the same way, the member kept. The raw values
are also scrubbed from the record's free text (:data:`TEXT_FIELDS`: a policy message that
echoes one, say) and from the recorded documents (:data:`DOCUMENT_FIELDS`: another argument
that repeats one, where a string holding one becomes its digest whole), never from the
record's member names or its other fields, so that a caller whose secret equals a field
name, a tool or an outcome cannot rewrite its own record.

Member names are matched by *pattern*, not by a list of exact names. A name is first
normalised into words (:func:`normalize_name`: ``"X-API-Key"``, ``"xApiKey"`` and
``"x.api.key"`` all become ``"x_api_key"``), then each pattern of :data:`DEFAULT_NAME_PATTERNS`
is searched in it. A name with characters beyond ASCII is also matched in its compatibility
form, where full-width letters, the long s, the Kelvin sign, the sharp s, accents and
invisible characters inside a word stand for the ASCII they look like (:func:`_compatible`).
The patterns cover a class of names (anything with *password*, *secret*, *token*,
*credential*, *cookie*, *session*, *private*, ... in it, and *key* qualified by *api*,
*access*, *signing*, ...), so unforeseen spellings are masked too. They err on the side of
masking: ``max_tokens``, ``token_count`` or ``private`` (a flag) are masked as well. A bare
``key`` is not (it names the key of a key-value store far more often than a credential).

The OPA decision-log mask policy (``policies/system/log/mask.rego``) carries the same
normalisation and the same default patterns; a test holds the two to one table. (The
compatibility form is the gateway's alone: the policy matches a name as it is written. Both
also match a name squashed to lower-case letters and digits, and both mask a member whose
name looks like a credential: the gateway digests the name, the policy masks its container,
since a path in OPA's decision log would still carry it.)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata
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

#: Patterns searched in every string value, whatever its member name, in every member name
#: and in the free text of every record (:data:`TEXT_FIELDS`): credentials that carry their
#: own shape (bearer tokens, PEM private keys, JWTs, passwords in URLs, ``name=value``
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


# What a name decomposes into that is no letter of its own: combining marks (accents, the dot
# of U+0130) and invisible format characters (zero-width space, soft hyphen, joiners, ...).
# Dropped, so that they cannot cut a word in two.
_INVISIBLE: Final = frozenset({"Mn", "Me", "Cf"})
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]+")
# The only characters that reach ASCII by a change of case and not by their compatibility
# decomposition (a test checks every code point): the sharp s by case folding, the dotless i
# by its capital, as (?i) matches it to one.
_CASED_ASCII: Final = (("\u00df", "ss"), ("\u1e9e", "SS"), ("\u0131", "i"))


def _visible(run: re.Match[str], category: Callable[[str], str] = unicodedata.category) -> str:
    return "".join([char for char in run.group() if category(char) not in _INVISIBLE])


def _compatible(name: str) -> str:
    """``name`` with every character beyond ASCII replaced by the ASCII it stands for.

    The compatibility forms of NFKC, and case folding: full-width letters, the long s
    (U+017F), the Kelvin sign (U+212A), ligatures, circled, modifier and mathematical letters
    become the ASCII letters they stand for, their case kept (a full-width ``DB_PASSWORD``
    becomes ``"DB_PASSWORD"``); the sharp s (U+00DF) becomes ``ss`` and the dotless i
    (U+0131) an ``i``; combining marks (an accent, the dot of U+0130) and invisible
    characters (a zero-width space inside ``token``) are dropped. ASCII is kept as it is (its
    capitals mark words for :func:`normalize_name`), and so is a character that stands for no
    ASCII (a Japanese letter): it separates words as before. Linear in the length of
    ``name``; only what is still beyond ASCII after the decomposition is looked at one
    character at a time.
    """
    if name.isascii():
        return name
    for char, letters in _CASED_ASCII:
        # str.replace only scans a name without the character.
        name = name.replace(char, letters)
    text = unicodedata.normalize("NFKD", name)
    return text if text.isascii() else _NON_ASCII.sub(_visible, text)


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


#: The members of an audit record that hold free text from a policy, a tool or an error: a
#: decision's ``message`` and ``reasons``, an error's ``detail``, a failed tool's or a refused
#: call's ``message``. :meth:`Masker.scrub` cleans these and no other member.
TEXT_FIELDS: Final = ("message", "reasons", "detail")
#: The members of an audit record that hold a masked document built from the call: its
#: ``arguments`` and a policy's audit ``fields``. :meth:`Masker.scrub` replaces a string of
#: theirs that holds a raw masked value (``{"api_key": k, "url": "...?key=" + k}``) by its
#: digest, whole: an echo of a secret is hidden, and stays comparable with the others. The
#: caller ``context`` is not among them: who called is never rewritten by what they sent.
DOCUMENT_FIELDS: Final = ("arguments", "fields")
#: Every member :meth:`Masker.scrub` cleans by default.
SCRUBBED_FIELDS: Final = TEXT_FIELDS + DOCUMENT_FIELDS

#: What :meth:`Masker.scrub` writes in place of a raw masked value in free text.
SCRUBBED: Final = "[masked]"
_NOT_ALNUM: Final = re.compile(r"[^a-z0-9]+")
#: A digest as :meth:`Masker.digest` writes it (made unique with ``~n`` as a member name).
_DIGEST: Final = re.compile(r"masked:[0-9a-f]{24}(?:~[0-9]+)?")


class Masker:
    """Replaces sensitive values with ``"masked:<digest>"``.

    Args:
        keys: member names to mask wherever they occur, compared case-insensitively without
            separators, as written and in their compatibility form (default
            :data:`DEFAULT_MASKED_KEYS`).
        patterns: regular expressions searched in every normalised member name
            (:func:`normalize_name`), and in that of its compatibility form; a match masks
            the member's whole value (default :data:`DEFAULT_NAME_PATTERNS`).
        values: regular expressions searched in every string value, every member name and
            the free text of every record; a match masks that string (default
            :data:`DEFAULT_VALUE_PATTERNS`).
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
        self._keys = frozenset(
            _normalize(form) for name in keys for form in (name, _compatible(name))
        )
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
        """Whether a member called ``name`` has its value masked wherever it occurs.

        A name beyond ASCII is judged as written and in its compatibility form
        (:func:`_compatible`: full-width ``password`` as ``"password"``); either one that
        matches masks it.
        """
        if len(name) > MAX_NAME_LENGTH:
            return True
        verdicts = self._name_verdicts
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = self._matches(name)
            if not verdict and not name.isascii():
                compatible = _compatible(name)
                verdict = compatible != name and self._matches(compatible)
            if len(verdicts) >= _NAME_MEMO:
                verdicts.clear()
            verdicts[name] = verdict
        return verdict

    def _matches(self, name: str) -> bool:
        if _normalize(name) in self._keys:
            return True
        names = self._names
        if names is None:
            return False
        if names.search(normalize_name(name)) is not None:
            return True
        # The name squashed (lower case, letters and digits only), for a word that its case
        # or a separator cuts in two (dbPASSword, xAPIkey, db_pa.ssword): a pattern that
        # matches inside a word matches it there too. Only ever adds to what is masked.
        squashed = _NOT_ALNUM.sub("", name.lower())
        return bool(squashed) and names.search(squashed) is not None

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
        """A masked copy of ``document``; raw masked strings are appended to ``found``.

        A member name that looks like a credential (:meth:`sensitive_value`) is replaced by
        its digest, one made unique within its object if need be: no member is lost.
        """
        sink = found if found is not None else []
        return self._walk(document, (), sink)

    def _walk(self, node: Any, path: tuple[str, ...], found: list[str]) -> Any:
        if path and path in self._pointers:
            return self._replace(node, found)
        # The memos are read in place first: nearly every name and value was seen before.
        innocent = self._innocent_values
        if isinstance(node, dict):
            verdicts = self._name_verdicts
            result: dict[Any, Any] = {}
            for name, value in node.items():
                if not isinstance(name, str):
                    result[name] = self._walk(value, (*path, str(name)), found)
                    continue
                # Pointers name the members as the document does, a masked name included.
                recorded = name
                if name not in innocent and self.sensitive_value(name):
                    _found(name, found)
                    recorded = _unique(self.digest(name), node, result)
                sensitive = verdicts.get(name)
                if sensitive is None:
                    sensitive = self.sensitive_name(name)
                if sensitive:
                    result[recorded] = self._replace(value, found)
                else:
                    result[recorded] = self._walk(value, (*path, name), found)
            return result
        if isinstance(node, list):
            return [self._walk(item, (*path, str(index)), found) for index, item in enumerate(node)]
        if isinstance(node, str) and node not in innocent and self.sensitive_value(node):
            return self._replace(node, found)
        return node

    def _replace(self, value: Any, found: list[str]) -> str:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if self.sensitive_value(item):
                    _found(item, found)
                else:
                    found.append(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif item is not None and not isinstance(item, bool):
                found.append(str(item))
        return self.digest(value)

    def scrub(
        self,
        record: dict[str, Any],
        secrets_found: Iterable[str],
        fields: Iterable[str] = SCRUBBED_FIELDS,
    ) -> dict[str, Any]:
        """A copy of ``record`` whose free text shows neither a raw masked value nor a credential.

        Only the members named in ``fields`` are cleaned, at any depth inside them. In free
        text (:data:`TEXT_FIELDS`) every occurrence of a value of ``secrets_found`` (those of
        four characters or more) becomes ``[masked]`` (overlapping occurrences as one); in a
        recorded document (:data:`DOCUMENT_FIELDS`, masked already) a string holding one
        becomes its digest, whole (digests already there are left as they are). In free
        text, a string that still looks like a credential (:meth:`sensitive_value`) then
        becomes its digest. In an object inside
        those members, a name holding either becomes its digest, made unique within the
        object. No other member is changed, nor any member name of the record: a secret
        that equals a field name, a tool name or an outcome leaves them be.
        """
        needles = tuple({s for s in secrets_found if len(s) >= _MIN_SCRUB})
        if not needles and self._values is None:
            return dict(record)
        result = dict(record)
        for field in fields:
            if field in result:
                whole = field in DOCUMENT_FIELDS
                if whole and not needles:
                    continue  # masked already: nothing of a credential's shape is left there
                result[field] = self._clean(result[field], needles, whole=whole)
        return result

    def _clean(self, node: Any, needles: tuple[str, ...], *, whole: bool) -> Any:
        if isinstance(node, str):
            if whole:
                # A masked document: what looked like a credential is a digest already.
                if any(n in node for n in needles) and _DIGEST.fullmatch(node) is None:
                    return self.digest(node)
                return node
            text = _scrubbed(node, needles)
            return self.digest(node) if self.sensitive_value(text) else text
        if isinstance(node, list):
            return [self._clean(item, needles, whole=whole) for item in node]
        if isinstance(node, dict):
            result: dict[Any, Any] = {}
            for name, value in node.items():
                recorded = name
                if isinstance(name, str) and (
                    _scrubbed(name, needles) != name or self.sensitive_value(name)
                ):
                    recorded = _unique(self.digest(name), node, result)
                result[recorded] = self._clean(value, needles, whole=whole)
            return result
        return node


def _found(text: str, found: list[str]) -> None:
    # A string masked for its shape, and its credential-sized pieces: the credential inside
    # the text may be echoed without its surroundings (the token of "Bearer <token>").
    found.append(text)
    found.extend(piece for piece in _PIECES.split(text) if len(piece) >= _MIN_PIECE)


def _unique(name: str, taken: dict[Any, Any], given: dict[Any, Any]) -> str:
    # A replacement member name that is no other name of the object, as it was (``taken``)
    # or as it is being written (``given``): two members never become one.
    candidate, count = name, 1
    while candidate in taken or candidate in given:
        count += 1
        candidate = f"{name}~{count}"
    return candidate


def _scrubbed(text: str, needles: tuple[str, ...]) -> str:
    # Every character of every occurrence of a needle, overlapping ones included, goes: each
    # run of them becomes one SCRUBBED. (Replacing one needle after another would leave the
    # part of a second needle that overlaps the first, and could match across a SCRUBBED.)
    spans: list[tuple[int, int]] = []
    for needle in needles:
        start = text.find(needle)
        while start >= 0:
            spans.append((start, start + len(needle)))
            start = text.find(needle, start + 1)
    if not spans:
        return text
    spans.sort()
    parts: list[str] = []
    kept = 0
    first, last = spans[0]
    for start, end in spans[1:]:
        if start > last:
            parts += (text[kept:first], SCRUBBED)
            kept, first = last, start
        last = max(last, end)
    parts += (text[kept:first], SCRUBBED, text[last:])
    return "".join(parts)
