"""gputop: a live terminal GPU monitor for people who train models."""

__version__ = "0.1.0"
