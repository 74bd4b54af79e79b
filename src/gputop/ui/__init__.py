"""The live dashboard (Textual). Nothing outside this package imports Textual."""

from gputop.ui.app import GputopApp

__all__ = ["GputopApp"]
