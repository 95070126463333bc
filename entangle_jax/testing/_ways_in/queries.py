"""The analysis in one call each: `happens_before`, `races` and friends.

Each builds an `OrderAnalysis` of the module (the parsed text of the last
few modules is kept, so ``races(c)`` then ``order_graph(c)`` parse once);
build one yourself to ask many questions of one module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from entangle_jax.testing._analysis.ops import Race
from entangle_jax.testing._analysis.order_analysis import (
  LeftOut,
  OrderAnalysis,
  Races,
)
from entangle_jax.testing._analysis.selectors import Selector
from entangle_jax.testing._emitters import text
from entangle_jax.testing._emitters.options import SHOWN_PER_GROUP
from entangle_jax.testing._findings import from_analysis
from entangle_jax.testing._hlo.module_text import CompiledModule


def happens_before(
  compiled: CompiledModule,
  before: Selector,
  after: Selector,
  *,
  all_ops: bool = False,
) -> bool:
  """Whether every op `before` selects precedes every op `after` selects.

  Precedence means a chain of the edges the XLA runtime honours (operands,
  not control predecessors; async pairs from their start to their done) in
  the compiled, optimized module, following nested computations through the
  instructions that call them. See the module docstrings of
  ``entangle_jax.testing._order.edges`` and
  ``entangle_jax.testing._analysis.order_analysis`` for exactly what is
  concluded.

  Args:
    compiled: a ``jax.stages.Compiled`` (``jax.jit(f).lower(*a).compile()``),
      a ``jax.stages.Lowered`` or the HLO text.
    before, after: selectors. A selector picks custom calls whose target
      equals it, and the effectful work (custom calls other than entangle's,
      communication, I/O) in the ``jax.named_scope`` of that name.
    all_ops: let scope selectors pick every op in the scope instead.

  Raises:
    TypeError: `compiled` is none of those (`module_text`), or a selector
      is not a str.
    ValueError: the text is not an optimized, scheduled module or cannot
      be read (`OrderAnalysis`), or a selector is empty or matches nothing;
      the message lists what exists.
  """
  return OrderAnalysis(
    compiled, all_ops=all_ops, who="happens_before"
  ).happens_before(before, after)


def assert_happens_before(
  compiled: CompiledModule,
  before: Selector,
  after: Selector,
  *,
  all_ops: bool = False,
) -> None:
  """Asserts `happens_before`, explaining every unordered pair on failure.

  Takes what `happens_before` takes, and raises what it raises.

  Raises:
    AssertionError: some op `before` selects does not precede some op
      `after` selects; the message names each pair by custom-call target,
      named scope and Python ``file:line``, and says the usual fix. If an
      ``entangle`` call in the module has only zero-size witnesses, which
      order nothing (`OrderAnalysis.empty_witness_entangles`), the message
      names it too, as it does an op that both selectors pick.
  """
  analysis = OrderAnalysis(
    compiled, all_ops=all_ops, who="assert_happens_before"
  )
  unordered = analysis.unordered(before, after)
  if unordered:
    count = len(unordered)
    message = format_races(
      unordered,
      heading=f"{before!r} does not happen before {after!r}: {count} "
      f"pair{'s' * (count != 1)} not ordered",
    )
    both = list(
      dict.fromkeys(r.first.name for r in unordered if r.first == r.second)
    )
    if both:
      message += (
        f"\n{before!r} and {after!r} both pick %{', %'.join(both)}: an op "
        "does not happen before itself; choose selectors that pick "
        "different ops."
      )
    empty = analysis.empty_witness_entangles()
    if empty:
      message += "\n" + text.empty_witness_note(from_analysis.call_sites(empty))
    raise AssertionError(message)


def races(
  compiled: CompiledModule,
  among: Iterable[Selector] | None = None,
  *,
  all_ops: bool = False,
) -> Races:
  """Pairs of calls that may conflict and that nothing keeps apart.

  Two calls conflict when they may touch one resource and at least one of
  them writes it (`entangle_jax.testing._order.access`: ``Resource`` records
  what its calls do, `declare_target_mode` declares read-only targets,
  anything else may write every resource). They are kept apart when a chain
  of the edges the runtime honours orders them, either way, when they lie in
  different branches of one ``conditional`` (`OrderAnalysis.exclusive`), or
  in a loop's condition and its body (`OrderAnalysis.sequenced`).

  Args:
    compiled: a ``jax.stages.Compiled``, ``jax.stages.Lowered`` or the
      optimized, scheduled HLO text.
    among: selectors choosing the ops to consider. By default the native
      calls (`is_user_native_call`): your FFI calls and side-effecting host
      callbacks, not entangle's, ``pure_callback`` nor JAX's and XLA's
      library kernels.
    all_ops: let scope selectors pick every op in the scope.

  Returns:
    `Race` pairs, ops in module text order by default, else in the order of
    the selectors in `among`. Each equals the ``(first, second)`` tuple of
    instruction names; `format_races` renders them with targets, scopes and
    source lines. The list is a `Races`: its ``left_out`` holds the pairs
    declared ``safe_pairs`` left out, which `format_races` counts.

  Raises:
    TypeError: `compiled` is none of those (`module_text`), `among` is a
      string rather than a sequence of selectors, or a selector is not a
      str.
    ValueError: the text is not an optimized, scheduled module or cannot
      be read (`OrderAnalysis`), or a selector is empty or matches nothing.
  """
  return OrderAnalysis(compiled, all_ops=all_ops, who="races").races(among)


def format_races(
  races: Sequence[Race],
  heading: str | None = None,
  *,
  shown_per_group: int | None = SHOWN_PER_GROUP,
  left_out: Sequence[LeftOut] | None = None,
) -> str:
  """Renders pairs grouped by their likely cause, each group with its fix.

  Args:
    races: pairs from `races` (shown with what each call accesses, grouped
      by cause, real hazards first, each cause with its stable code), or
      from `OrderAnalysis.unordered` (given a `heading`).
    heading: first line; by default it counts the races. With a heading,
      each pair reads "``first`` is not ordered before ``second``".
    shown_per_group: how many entries of each group to show (None: all);
      the rest are counted. Pairs of the same two targets on the same two
      lines of the user's code are one entry, with their count.
    left_out: the pairs declared safe pairs left out
      (`OrderAnalysis.safe_pairs_left_out`), counted by entry; by default
      those `races` came with (``races()`` answers a `Races` list that
      holds them). A report never says "No races" when there are some;
      where there are none, a `Races` list without a pair is rendered
      with the declarations applied to its calls.

  Raises:
    TypeError: an element of `races` is not a `Race` (a tuple of names
      says too little to render), or `shown_per_group` is not an int or
      None.
    ValueError: `shown_per_group` is below 1.
  """
  if shown_per_group is not None and (
    isinstance(shown_per_group, bool) or not isinstance(shown_per_group, int)
  ):
    raise TypeError(
      "format_races: shown_per_group must be an int or None, not "
      f"{type(shown_per_group).__name__}"
    )
  if shown_per_group is not None and shown_per_group < 1:
    raise ValueError(
      f"format_races: shown_per_group must be at least 1, not {shown_per_group}"
    )
  if not isinstance(races, Iterable):
    raise TypeError(
      f"format_races: races must be a list of Race (what races() returns), "
      f"not {type(races).__name__}"
    )
  for index, race in enumerate(races):
    if not isinstance(race, Race):
      raise TypeError(
        f"format_races: races[{index}] is {type(race).__name__} {race!r}, "
        "not a Race: pass what races() or OrderAnalysis.unordered() returned"
      )
  if left_out is None:
    left_out = getattr(races, "left_out", ())
  if heading is not None:
    return text.unordered_lines(heading, from_analysis.pairs_of(races))
  report = text.pairs_report(
    from_analysis.findings_of(races, left_out),
    getattr(races, "declared", ()),
    shown_per_group,
  )
  unseen = getattr(races, "unseen", None)
  return report if unseen is None else f"{report}\nNote: {unseen}"
