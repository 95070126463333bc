"""The benchmark of entangle-jax: a development tool, not in the wheel.

``python -m benchmarks [--quick]`` runs it from the repository root (see
`benchmarks.runner` and the README's "Performance" section). The modules,
each with one concern:

* `cases`: the implementations compared, sizes, the metrics and labels;
* `runner`: the command line; runs the worker subprocesses in alternating
  rounds (`rounds`) and writes the results; `peer`: entangle-jax 0.1.1's
  venv;
* `worker`: one subprocess, one part (`parts`: call_time, compile_time,
  hlo_structure, handler_time, analysis_time, dump_check_time,
  program_order_time) around the programs in `programs`, timed with
  `timing`;
* `stats`, `comparisons`: spreads over rounds and noise-aware verdicts;
* `report`, `chart`: the Markdown tables and the PNG.

``python -m benchmarks.alternatives`` is a measurement of its own: the
ways of ordering a native read before the next write, compared
(docs/alternatives.md): `alternatives` (the command and its checks),
`orderings` (one row each), `hazard_runs` (wrong reads, and what the
analysis says), `ordering_cost`, `ordering_transforms`, `host_store`.
``python -m benchmarks.deep_programs`` times the race check on programs
that nest deeply or carry a lot (`deep_programs`, whose programs
tests/analysis/deep_programs_test.py checks the answers of).

Adding a measurement: a module in `parts` with ``measure(args) -> dict``,
its name in `worker.PARTS`, a line in `runner.main` that runs it (for which
implementations, how many rounds) and stores the result under a key of
``results``, and a function in `report.SECTIONS` that turns that key into
lines of the report (a panel in `chart`, optionally).
"""
