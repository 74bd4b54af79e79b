"""Untrusted text (process names, command lines, user names, file contents) made safe to print.

Control characters would let a process name move the cursor, retitle the terminal or hide text;
they are shown as visible escapes instead. Callers that render Rich/Textual content must still
pass the result as plain text, never as markup.
"""

from __future__ import annotations

import unicodedata

_REPLACEMENTS = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def printable(s: str) -> str:
    """`s` with every control, format (bidi overrides) and surrogate character escaped."""
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch in _REPLACEMENTS:
            out.append(_REPLACEMENTS[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def command_line(args: tuple[str, ...] | list[str]) -> str:
    return printable(" ".join(args))
