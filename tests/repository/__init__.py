"""Tests of the repository rather than the library: docs, README commands,
metadata, wheels, installed files, headers, imports."""
