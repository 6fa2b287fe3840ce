"""Log fields that a client chose, written so that they cannot forge a line."""

from __future__ import annotations

import re

from petstore import text as characters

#: Control characters (C0, DEL, C1: ESC and CSI included) and the Unicode line and
#: paragraph separators: none reaches a log line as itself.
_CONTROL = re.compile(f"[{characters.CONTROLS}\u2028\u2029]")
#: What a field's value never shows as itself: the controls above, every white space
#: (the text format's separator among them), the bidi controls, which reorder what a
#: terminal shows, what is drawn as nothing (:data:`petstore.text.INVISIBLE`), and
#: the backslash that starts an escape.
_NOT_IN_FIELD = re.compile(
    f"[\\\\\\s{characters.CONTROLS}{characters.BIDI_CONTROLS}{characters.INVISIBLE}]"
)
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def escape_controls(text: str) -> str:
    """``text`` with each control character written as a Python escape (``\\n``,
    ``\\r``, ``\\t``, else ``\\x1b``, ``\\u2028``): a message can then neither start a
    forged line nor send terminal escape sequences to whoever reads the log.
    Anything else is left as it is."""
    return characters.escape(_CONTROL, text, _ESCAPES)


def escape_field(text: str) -> str:
    """``text`` as one field of a log line: :func:`escape_controls`, and also every
    white space (a space as ``\\x20``), every bidi control and invisible character
    (``\\u202e``, ``\\u061c``, ``\\xad``) and the backslash (``\\\\``) escaped. A value a
    client chose (the path of an unknown route, a refused forwarded address) then
    cannot end its field and forge the next one (``api_key_id=1``) in a text line, nor
    reorder what a terminal shows, and every escape reads back one way."""
    return characters.escape(_NOT_IN_FIELD, text, _ESCAPES)
