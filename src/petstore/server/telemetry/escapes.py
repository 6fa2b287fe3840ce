"""Log fields that a client chose, written so that they cannot forge a line."""

from __future__ import annotations

import re

#: Control characters (C0, DEL, C1: ESC and CSI included) and the Unicode line and
#: paragraph separators: none reaches a log line as itself.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: What a field's value never shows as itself: the controls above, every white space
#: (the text format's separator among them), the invisible format characters (bidi
#: controls, which reorder what a terminal shows, and zero-width ones) and the
#: backslash that starts an escape.
_NOT_IN_FIELD = re.compile(r"[\\\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(match: re.Match[str]) -> str:
    char = match[0]
    code = ord(char)
    return _ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_controls(text: str) -> str:
    """``text`` with each control character written as a Python escape (``\\n``,
    ``\\r``, ``\\t``, else ``\\x1b``, ``\\u2028``): a message can then neither start a
    forged line nor send terminal escape sequences to whoever reads the log.
    Anything else is left as it is."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape, text)


def escape_field(text: str) -> str:
    """``text`` as one field of a log line: :func:`escape_controls`, and also every
    white space (a space as ``\\x20``), every invisible format character (``\\u202e``)
    and the backslash (``\\\\``) escaped. A value a client chose (the path of an
    unknown route, a refused forwarded address) then cannot end its field and
    forge the next one (``api_key_id=1``) in a text line, nor reorder what a
    terminal shows, and every escape reads back one way."""
    if _NOT_IN_FIELD.search(text) is None:
        return text
    return _NOT_IN_FIELD.sub(_escape, text)
