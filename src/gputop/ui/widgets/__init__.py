"""Dashboard widgets, one a module."""
