"""Horizontal meters as Textual Content: `▕██████▌   ▏` with eighth-block resolution.

Styles name theme variables ($primary, $warning...), so the meters follow the theme, the 16-colour
ANSI theme included; NO_COLOR still reads because the bar's length carries the value."""

from __future__ import annotations

from textual.content import Content

EIGHTHS = " ▏▎▍▌▋▊▉"
FULL = "█"
RESERVED = "▒"
LEFT, RIGHT = "▕", "▏"
FRAME_STYLE = "$foreground-muted"


def _fill(cells: float, width: int) -> str:
    cells = max(0.0, min(float(width), cells))
    full = int(cells)
    eighths = round((cells - full) * 8)
    if eighths == 8:
        full, eighths = full + 1, 0
    text = FULL * full
    if full < width and eighths:
        text += EIGHTHS[eighths]
    return text


Part = tuple[str, str]  # (text, style): what Content.assemble takes, joined once per line


def meter_parts(fraction: float | None, width: int, style: str) -> list[Part]:
    """A framed bar `width` cells wide inside the frame; None draws an empty frame."""
    fill = "" if fraction is None else _fill(fraction * width, width)
    return [(LEFT, FRAME_STYLE), (fill, style), (" " * (width - len(fill)), ""),
            (RIGHT, FRAME_STYLE)]


def memory_parts(used: float | None, reserved: float | None, width: int, style: str,
                 reserved_style: str = "$foreground-muted") -> list[Part]:
    """Memory used by processes (█), held by the driver (▒), free (blank); fractions of total."""
    if used is None:
        return meter_parts(None, width, style)
    fill = _fill(used * width, width)
    # Reserved memory is small (hundreds of MiB of 80 GiB): round it up to one cell when present,
    # so the user sees that part of the total is not theirs.
    rsv_cells = 0
    if reserved:
        rsv_cells = max(1, round(reserved * width))
        rsv_cells = min(rsv_cells, width - len(fill))
    return [(LEFT, FRAME_STYLE), (fill, style), (RESERVED * rsv_cells, reserved_style),
            (" " * (width - len(fill) - rsv_cells), ""), (RIGHT, FRAME_STYLE)]


def meter(fraction: float | None, width: int, style: str) -> Content:
    return Content.assemble(*meter_parts(fraction, width, style))


def level_style(fraction: float | None, base: str, warn_at: float = 0.95,
                warn: str = "$warning") -> str:
    """The bar's style: `base`, or `warn` when the value is at the top of its range."""
    return warn if fraction is not None and fraction >= warn_at else base
