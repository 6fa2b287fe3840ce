"""Characters that never reach a terminal or a log line as themselves, and how they
are written instead: read by D2's name rule (:mod:`petstore.schemas`), the log
format (``petstore.server.telemetry.escapes``) and the command's tables
(:mod:`petstore.cli.tables`), so that the three agree on what hides or reorders text.

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
