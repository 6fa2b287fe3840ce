"""Log fields that a client chose, written so that they cannot forge a line."""

from __future__ import annotations

import re

#: Control characters (C0, DEL, C1: ESC and CSI included) and the Unicode line and
#: paragraph separators: none reaches a log line as itself.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with each control character written as a Python escape (``\\n``,
    ``\\r``, ``\\t``, else ``\\x1b``, ``\\u2028``): a client's bytes (a path, a
    forwarded address) can then neither start a forged line nor send terminal escape
    sequences to whoever reads the log. Anything else is left as it is."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: _ESCAPES.get(m[0]) or repr(m[0])[1:-1], text)
