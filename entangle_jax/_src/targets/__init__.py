"""What a native target does: one place, read by the race check
(`entangle_jax.testing`) and by the core alike, loading no extension and
no jax.

* `names`: entangle's own target and JAX's host-callback targets.
* `library_kernels`: JAX's and XLA's own kernels and markers, which touch
  no native state.
* `declaration`: what a declaration says (`TargetDeclaration`,
  `SafePair`, `Declarations`) and which one applies to a target.
* `table`: the ``[tool.entangle-jax]`` table's form and keys, and finding
  a project's ``pyproject.toml``.
* `in_code`: `declare_target` and `declare_target_mode`.
* `shipped`: the declarations entangle-jax ships for klujax, jax-finufft
  and mpi4jax, each with its source and reason, applied at the versions
  checked.
* `sources`: every source in precedence order (`sources.current`),
  entry points and what is built in.
* `example_store`: the example store's targets, as a table.
"""
