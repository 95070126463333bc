"""Tests of `in_program_order`: native calls ordered as the program made
them, one file per concern, each ordering test with its control."""
