from gputop.safetext import command_line, printable


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
