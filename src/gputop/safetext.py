"""Untrusted text (process names, command lines, user names, file contents) made safe to print.

Control characters would let a process name move the cursor, retitle the terminal or hide text;
they are shown as visible escapes instead. Callers that render Rich/Textual content must still
pass the result as plain text, never as markup.

Text from the host may not be UTF-8 at all: Linux allows any byte but NUL in a command line or a
file name, and Python decodes such bytes to lone surrogates ("\udcff" for the byte 0xff), which
no UTF-8 file, JSON document or terminal can carry. `encodable` turns them into visible escapes
("\\xff") where the text enters gputop, and before anything is written.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

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
        elif "\ud800" <= ch <= "\udfff":
            out.append(_escape_surrogate(ch))
        elif unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cn", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def command_line(args: tuple[str, ...] | list[str]) -> str:
    return printable(" ".join(args))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(ch: str) -> str:
    code = ord(ch)
    # U+DC80..U+DCFF stand for the undecodable bytes 0x80..0xff (Python's surrogateescape).
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def encodable(s: str) -> str:
    """`s` with every lone surrogate (an undecodable byte) written as a visible escape, so that
    it encodes to UTF-8; other text is returned as it is, at the cost of one scan."""
    if s.isascii() or not _SURROGATE.search(s):
        return s
    return _SURROGATE.sub(lambda m: _escape_surrogate(m.group()), s)


def encodable_tree(obj: Any) -> Any:
    """A JSON-like value (dicts, lists, tuples, strings, numbers) with every string, keys
    included, made `encodable`."""
    if isinstance(obj, str):
        return encodable(obj)
    if isinstance(obj, dict):
        return {encodable_tree(k): encodable_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encodable_tree(v) for v in obj]
    return obj
