"""Stage 5, the ways in: how a user asks for the race check.

`queries` (``happens_before``, ``races`` on a ``Compiled``), `module_files`
(checking a set of dumped module files), `dump_watch` (the modules a
process dumps as it compiles), `command` (``python -m
entangle_jax.testing``, its ``--ranks`` included), `executions` (the
execution record a rank keeps for ``--ranks``), `launcher_ranks` (which
rank of a launch this process is), `race_check` (a context manager) and
`plugin` (``pytest --entangle-races``). Each builds the findings of stage
4 and hands them to one of its emitters; the analysis, the cross-rank
check's included, lives in the stages below.
"""
