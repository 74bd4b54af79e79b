"""Importers: turn outputs people already have (nvidia-smi logs) into gputop Snapshots.

Each importer is a pure function of the text it is given. A field the output does not carry is
`Missing("unsupported")` with a detail saying so; malformed input raises `ValueError` with a
one-line message.
"""
