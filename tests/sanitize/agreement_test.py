"""The sanitizer's agreement line reads the static check's verdict on the
two calls as they ran: on two devices of an SPMD module, the verdict
across devices (issue 59), each case beside its control."""

import io

from absl.testing import absltest

from entangle_jax import testing
from entangle_jax._src.targets.declaration import (
  Declarations,
  TargetDeclaration,
)
from entangle_jax.testing._sanitize import (
  callbacks,
  checks,
  session,
  sites,
  user_modules,
)
from entangle_jax.testing._sanitize.calls import SanitizedCall, SanitizedObject
from entangle_jax.testing._sanitize.checks import SanitizerRace
from tests.hand_written_hlo import hlo_module

W = "tp_set"


def _module(entry: str) -> str:
  """`entry` as a scheduled module of two partitions."""
  return hlo_module(entry).replace(
    "HloModule rules, is_scheduled=true",
    "HloModule rules, is_scheduled=true, num_partitions=2",
  )


def _call(
  target: str, operand: str, name: str, shape: str = "s32[]", line: int = 1
) -> str:
  """A side-effecting call, located at line `line` of ``user.py`` (the
  Python stack the sanitizer's call site carries too)."""
  return (
    f"%{name} = {shape} custom-call(%{operand}), "
    f'custom_call_target="{target}", custom_call_has_side_effect=true, '
    f'metadata={{source_file="user.py" source_line={line}}}'
  )


class _Executable:
  """What a compile returns, as far as `user_modules.UserModule` reads it."""

  def __init__(self, text: str):
    self.text = text

  def hlo_modules(self):
    text = self.text

    class _Module:
      def to_string(self) -> str:
        return text

    return [_Module()]


def _no_bytecode(computation):
  raise ValueError("no MLIR module in a hand-written test")


def _static(
  text: str,
  declarations: Declarations,
  names: list[str],
  user_text: str | None = None,
):
  """A `session._Static` that has read `text` as the module the calls of
  sites 0, 1, ... (ops `names`, at lines 1, 2, ... of ``user.py``) ran in,
  the user's own module being `user_text` (default: `text`), and those
  sites."""
  analysis = testing.OrderAnalysis(text, declarations=declarations)
  ops = {op.name: op for op in analysis.select_ops(W)}
  module = sites.SanitizedModule("jit_f", 0, "Host")
  users = {
    module.serial: user_modules.UserModule(
      lambda: _Executable(text if user_text is None else user_text),
      None,
      _no_bytecode,
    )
  }
  static = session._Static(declarations, users)
  static.analyses[module.serial] = (
    analysis,
    {k: ops[n] for k, n in enumerate(names)},
    {},  # No module before optimization at hand.
  )
  placed = [
    sites.CallSite(
      k,
      module,
      k,
      W,
      in_loop=False,
      in_branch=False,
      stack=(("user.py", k + 1),),
    )
    for k in range(len(names))
  ]
  return static, placed


def _ran(
  site: sites.CallSite, device: int, value: int = 7, run_id: int = 1
) -> SanitizedCall:
  return SanitizedCall(
    W, "Host", "lib", 1, 0, 10, run_id, site, ((0, (value,)),), device=device
  )


class AgreementTest(absltest.TestCase):
  def test_a_per_device_target_on_two_devices_is_no_conflict(self):
    # One call of a target declared per-device, run on both devices: the
    # static check reads each device's own object (no race across
    # devices), which the line says. It had asked about one device, where
    # the call conflicts with itself, and said "finds them ordered".
    text = _module(f"%p = s32[] parameter(0)\n{_call(W, 'p', 'one')}")
    per_device = Declarations(
      (TargetDeclaration(W, "write", 0, devices="per-device"),)
    )
    static, (site,) = _static(text, per_device, ["one"])
    a, b = _ran(site, 0), _ran(site, 1)
    self.assertIn("finds no conflict", static.finding(a, b) or "")
    # Control: shared across devices, the static check reports the pair.
    shared = Declarations((TargetDeclaration(W, "write", 0),))
    static, (site,) = _static(text, shared, ["one"])
    self.assertEqual(
      static.finding(_ran(site, 0), _ran(site, 1)),
      "the static check reports them as may race, and they did",
    )

  def test_shards_declared_distinct_are_distinct_across_devices(self):
    # Two calls on a split argument whose elements are declared distinct:
    # on two devices they hold two shards, different objects by the
    # declaration; one object at run time contradicts it. On one device
    # (the control) they hold one shard, one object.
    text = _module(
      "%p = s32[1] parameter(0), sharding={devices=[2]<=[2]}\n"
      + _call(W, "p", "one", "s32[1]")
      + "\n"
      + _call(W, "p", "two", "s32[1]", line=2)
    )
    distinct = Declarations(
      (TargetDeclaration(W, "write", 0, distinct_elements=True),)
    )
    static, (first, second) = _static(text, distinct, ["one", "two"])
    self.assertIn(
      "declarations make them different objects",
      static.distinct(_ran(first, 0), _ran(second, 1)) or "",
    )
    self.assertIsNone(static.distinct(_ran(first, 0), _ran(second, 0)))

  def test_the_static_word_is_the_users_module_not_the_sanitized_copy(self):
    # Issue 78, defect 3: the sanitized copy (identical calls not merged,
    # shared functions copied) can report a pair that races() of the
    # user's own module does not. The report's word must be the user's
    # module's: here it orders the two calls (an edge the copy lacks), so
    # the report must not say that the static check reports them.
    declarations = Declarations((TargetDeclaration(W, "write", 0),))
    copy = hlo_module(
      f"%p = s32[] parameter(0)\n{_call(W, 'p', 'one')}\n"
      + _call(W, "p", "two", line=2)
    )
    users = hlo_module(
      f"%p = s32[] parameter(0)\n{_call(W, 'p', 'one')}\n"
      + _call(W, "one", "two", line=2)
    )
    self.assertEmpty(testing.races(users))
    self.assertLen(testing.races(copy), 1)
    static, (first, second) = _static(copy, declarations, ["one", "two"], users)
    a, b = _ran(first, 0), _ran(second, 0)
    finding = static.finding(a, b) or ""
    self.assertNotIn("reports them", finding)
    self.assertIn("finds them ordered", finding)
    self.assertIsNone(static.cause(a, b))
    # Control: the user's module is the copy's program; then it reports
    # the pair, with its cause's fix.
    static, (first, second) = _static(copy, declarations, ["one", "two"])
    a, b = _ran(first, 0), _ran(second, 0)
    self.assertEqual(
      static.finding(a, b),
      "the static check reports them as may race, and they did",
    )
    cause = static.cause(a, b)
    self.assertIsNotNone(cause)
    self.assertNotEmpty(cause.steps)

  def test_no_word_or_fix_on_two_calls_of_two_executions(self):
    # Skeptic pass r78h: a race between two executions (another thread's
    # run of the module landing in this one's) was given the static
    # check's word on the pair as if one execution had made both calls:
    # "reports them as may race" with its fix (an entangle inside the
    # module, which orders nothing across executions), or "finds them
    # ordered, yet they raced" for one op's two runs.
    declarations = Declarations((TargetDeclaration(W, "write", 0),))
    text = hlo_module(
      f"%p = s32[] parameter(0)\n{_call(W, 'p', 'one')}\n"
      + _call(W, "p", "two", line=2)
    )
    self.assertLen(testing.races(text), 1)
    static, (first, second) = _static(text, declarations, ["one", "two"])
    seen = session.Seen(_static=static)
    obj = SanitizedObject("lib", 7)

    def race(kind, a, b):
      return SanitizerRace(kind, a, b, obj)

    across = [
      race(checks.OVERLAP, _ran(first, 0), _ran(second, 0, run_id=2)),
      race(checks.OVERLAP, _ran(first, 0), _ran(first, 0, run_id=2)),
      race(checks.INTERLEAVED, _ran(first, 0), _ran(second, 0, run_id=2)),
    ]
    for r in across:
      self.assertEqual(seen.static_finding(r), session.ACROSS_EXECUTIONS)
      self.assertIsNone(seen.static_cause(r))
      self.assertIsNone(seen.static_fix(r))
    text_report = seen.report(file=io.StringIO())
    self.assertNotIn("reports them", text_report)
    self.assertNotIn("Fix:", text_report)
    # Control: the same two ops in one execution (and a callback's run
    # that its recorder could not place) get the static check's word and
    # fix.
    one = [
      race(checks.OVERLAP, _ran(first, 0), _ran(second, 0)),
      race(
        checks.OVERLAP,
        _ran(first, 0),
        _ran(second, 0, run_id=callbacks.UNKNOWN_RUN),
      ),
    ]
    for r in one:
      self.assertEqual(
        seen.static_finding(r),
        "the static check reports them as may race, and they did",
      )
      self.assertIsNotNone(seen.static_fix(r))

  def test_no_word_where_the_users_module_is_not_at_hand(self):
    # Without the user's module the report says nothing of the static
    # check, rather than the copy's answer.
    declarations = Declarations((TargetDeclaration(W, "write", 0),))
    copy = hlo_module(
      f"%p = s32[] parameter(0)\n{_call(W, 'p', 'one')}\n"
      + _call(W, "p", "two", line=2)
    )
    static, (first, second) = _static(copy, declarations, ["one", "two"])
    static.user_modules.clear()
    self.assertIsNone(static.finding(_ran(first, 0), _ran(second, 0)))


if __name__ == "__main__":
  absltest.main()
