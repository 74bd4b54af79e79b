import json
import os

from gputop.safetext import command_line, encodable, encodable_tree, printable


def test_plain_text_is_unchanged() -> None:
    assert printable("python3 train.py --lr 3e-4 日本語") == "python3 train.py --lr 3e-4 日本語"


def test_terminal_escapes_and_controls_become_visible() -> None:
    assert printable("\x1b[2J\x1b]0;owned\x07x") == "\\x1b[2J\\x1b]0;owned\\x07x"
    assert printable("a\rb\nc\td") == "a\\rb\\nc\\td"
    assert printable("\x9b31m") == "\\x9b31m"  # C1 CSI


def test_bidi_overrides_cannot_reorder_a_command() -> None:
    assert printable("evil\u202egnp.exe") == "evil\\u202egnp.exe"


def test_command_line_joins_then_escapes() -> None:
    assert command_line(("python", "-c", "print(1)\n")) == "python -c print(1)\\n"


def test_undecodable_bytes_become_visible_escapes_that_encode() -> None:
    name = os.fsdecode(b"caf\xc3\xa9-\xff\xfe")  # UTF-8 then two bytes that are not
    assert encodable(name) == "café-\\xff\\xfe"
    assert encodable(name).encode("utf-8")
    assert printable(name) == "café-\\xff\\xfe"  # the same escape on screen
    assert encodable("plain") == "plain"


def test_a_json_tree_is_made_encodable_keys_and_all() -> None:
    tree = {"cmdline": ("a\udcff", 1), "k\udcfe": [None, {"x": "\ud800"}]}
    assert encodable_tree(tree) == {"cmdline": ["a\\xff", 1], "k\\xfe": [None, {"x": "\\ud800"}]}
    assert json.dumps(encodable_tree(tree), ensure_ascii=False).encode("utf-8")
