"""Tests of the primitive: entangle's values and types, transformations,
donation, the seed's run-time hazard, and ordering on a GPU."""
