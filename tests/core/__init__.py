"""Tests of the primitive: entangle's values, transformations, sharding,
export, the extensions, ordering at run time."""
