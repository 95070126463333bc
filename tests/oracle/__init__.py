"""Tests of the order oracle: the analysis's claims against what XLA:CPU ran."""
