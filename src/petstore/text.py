"""What never reaches a terminal or a log line as itself, and how it is written
instead: characters that hide or reorder text, read by D2's name rule
(:mod:`petstore.schemas`), the log format (``petstore.server.telemetry.escapes``),
the service's messages and everything the ``petstore`` command prints
(:func:`printable`), so that they agree on what hides or reorders text; and the
user name and password a URL may carry (:func:`printable_url`), for every message
of the client and the command that names a URL.

Each set is the body of a regular expression's character class.
"""

from __future__ import annotations

import re

#: C0 controls, DEL and the C1 controls (ESC and CSI among them): Unicode category Cc.
CONTROLS = "\x00-\x1f\x7f-\x9f"
#: The bidi controls (Unicode's Bidi_Control), which reorder what is shown around
#: them (U+202E RIGHT-TO-LEFT OVERRIDE).
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: The line and paragraph separators, the blank symbols (U+2800 BRAILLE PATTERN
#: BLANK, U+1D159 MUSICAL SYMBOL NULL NOTEHEAD) and the default-ignorable code points
#: (Unicode's Default_Ignorable_Code_Point, drawn as nothing: U+200B ZERO WIDTH SPACE,
#: U+3164 HANGUL FILLER, U+00AD SOFT HYPHEN, ...) except those that join or select
#: within a visible sequence: the joiners U+200C and U+200D (emoji ZWJ sequences,
#: Persian and Indic words), the variation selectors (U+FE0F of emoji) and the tag
#: characters of emoji flags.
INVISIBLE = (
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u200b\u2028\u2029\u2060-\u2065"
    "\u206a-\u206f\u2800\u3164\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d159\U0001d173-\U0001d17a\U000e0000-\U000e001f\U000e0080-\U000e00ff"
    "\U000e01f0-\U000e0fff"
)


def escape(pattern: re.Pattern[str], text: str, escapes: dict[str, str]) -> str:
    """``text`` with each character that ``pattern`` matches written as ``escapes``
    says (``"\\n": "\\\\n"``), else as a Python escape (``\\x1b``, ``\\u202e``,
    ``\\U000e0001``); the rest as it is."""
    if pattern.search(text) is None:
        return text

    def escaped(match: re.Match[str]) -> str:
        char = match[0]
        code = ord(char)
        if char in escapes:
            return escapes[char]
        if code < 0x100:
            return f"\\x{code:02x}"
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"

    return pattern.sub(escaped, text)


#: Every character :func:`printable` escapes: :data:`CONTROLS`, the line and
#: paragraph separators, :data:`BIDI_CONTROLS` and :data:`INVISIBLE`.
_UNPRINTABLE = re.compile(f"[{CONTROLS}\u2028\u2029{BIDI_CONTROLS}{INVISIBLE}]")
_PRINTABLE_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: An ellipsis ends text that :func:`printable` cut.
ELLIPSIS = "…"


def printable(text: str, *, limit: int | None = None) -> str:
    """``text`` as it may be shown on a terminal or in a message: each control, line
    separator, bidi control and invisible character written as a Python escape
    (``\\n``, ``\\x1b``, ``\\u202e``, ``\\u200b``), the rest as it is. With ``limit``
    (characters, at least 1), text longer than that is cut to its first ``limit``
    characters and :data:`ELLIPSIS`, before escaping, so the cost and the length of
    what is shown stay bounded whatever was sent."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + ELLIPSIS
    return escape(_UNPRINTABLE, text, _PRINTABLE_ESCAPES)


#: A URL's user-info (RFC 3986 section 3.2.1: ``user:password@`` between ``//`` and
#: the host), or the same before the host of a URL written without its scheme: up to
#: the last ``@`` before the path, the query or the fragment, as URL parsers take it
#: (a password with an unescaped ``@`` is hidden whole).
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?[^/?#]*@")
#: What stands for a user-info removed.
HIDDEN_USERINFO = "***@"


def printable_url(url: str) -> str:
    """``url`` as it may be shown in a message or a log line: its user-info, if any,
    replaced by :data:`HIDDEN_USERINFO` (``http://***@db1:8000/v1``), so that no
    password given in a URL is ever printed back, then :func:`printable`. Never
    raises, whatever ``url`` holds."""
    return printable(_USERINFO.sub(lambda match: (match[1] or "") + HIDDEN_USERINFO, url, 1))
