"""Views the dashboard opens over itself, one a module."""
