"""The sanitizer's watchdog and its record across ranks, in fresh
interpreters (the sanitizer wraps only the targets registered after it
started), each with an outer timeout.

* One process: a call that sleeps past the watchdog's limit is reported
  while in flight, by its target and its file:line; the control, a call
  that returns within the limit, is not.
* Two local processes, given the variables ``mpirun`` sets (rank, size,
  launch), each make two "allreduces" of different sizes (the example
  store's write handler under a target declared ``communicates``; nothing
  is sent). Rank 1 makes them in the other order, and rank 0's first call
  sleeps, standing for an MPI collective that waits for a match that never
  comes: its watchdog reports it and ends the process (``on_hang="exit"``),
  and the merge names call 0 on both ranks, rank 0's in flight. The
  control makes them in one order: both finish, and the merge says they
  agree, with no report.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
from typing import Any, cast

from absl.testing import absltest

from entangle_jax.testing._sanitize import rank_calls, watchdog
from tests import test_util

TIMEOUT_S = 240
"""The outer limit of each fresh interpreter (a hang the watchdog misses
fails the test instead of stopping the run)."""

ONE_PROCESS = textwrap.dedent(
  """
  import json, sys
  import jax, jax.numpy as jnp
  from entangle_jax import testing
  from entangle_jax.testing._sanitize import watchdog

  with testing.sanitize():  # Starts it before the store registers.
    from entangle_jax.testing import example_store as store

  def program(delay_us):
    return jax.jit(
      lambda s: store.write_slot(s, 1.0, delay_us=delay_us)  # THE CALL
    )

  out = {"outside": watchdog.calls_in_flight()}
  for name, delay_us, limit in (("late", 1_500_000, 0.3),
                                ("in_time", 50_000, 2.0)):
    run = program(delay_us)
    with testing.sanitize(watchdog=limit) as seen:
      jax.block_until_ready(run(jnp.int32(3)))
    out[name] = {"hangs": seen.hangs, "calls": len(seen.calls)}
  print(json.dumps(out))
  """
)

RANK = textwrap.dedent(
  """
  import os, sys
  import jax, jax.numpy as jnp
  import numpy as np
  from entangle_jax import declare_target, entangle, testing

  FOLDER, SWAP, DELAY_US = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
  RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])

  with testing.sanitize():  # Wraps the targets registered from now on.
    from entangle_jax.testing import _example_resource_ffi as ffi
    jax.ffi.register_ffi_target(
      "rank_allreduce", ffi.registrations()["write_slot"], platform="cpu"
    )
  declare_target("rank_allreduce", communicates={"kind": "collective"})

  def allreduce(n):
    return jax.ffi.ffi_call(
      "rank_allreduce", jax.ShapeDtypeStruct((n,), jnp.int32),
      has_side_effect=True,
    )

  def operands(n, after=None):
    slots = jnp.arange(n, dtype=jnp.int32)
    if after is not None:  # In this order on the rank.
      slots = entangle(slots, after)
    return slots, jnp.ones(n)

  def program():
    delay = {"delay_us": np.int64(DELAY_US)} if DELAY_US and RANK == 0 else {}
    if SWAP and RANK == 1:
      large = allreduce(4)(*operands(4))  # RANK 1 LARGE FIRST
      return allreduce(2)(*operands(2, large))
    small = allreduce(2)(*operands(2), **delay)  # SMALL
    return allreduce(4)(*operands(4, small))

  with testing.sanitize(watchdog=1.0, on_hang="exit", ranks=FOLDER):
    jax.block_until_ready(jax.jit(program)())
  print("rank", RANK, "finished")
  """
)


def _line_of(source: str, marker: str) -> int:
  """The 1-based line of `source` that holds `marker`."""
  lines = source.splitlines()
  return next(k + 1 for k, line in enumerate(lines) if marker in line)


def run_ranks(folder: str, swap: bool, delay_us: int) -> list[tuple[int, str]]:
  """`RANK` as ranks 0 and 1 of one launch, at once: exit statuses and
  outputs. Either left running past `TIMEOUT_S` is killed."""
  with tempfile.NamedTemporaryFile(
    "w", suffix="_rank.py", delete=False
  ) as script:
    script.write(RANK)
  processes = []
  for rank in range(2):
    env = dict(
      test_util.child_env(),
      OMPI_COMM_WORLD_RANK=str(rank),
      OMPI_COMM_WORLD_SIZE="2",
      PMIX_NAMESPACE="watchdog_test",
    )
    env.pop("XLA_FLAGS", None)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    processes.append(
      subprocess.Popen(
        [sys.executable, script.name, folder, str(int(swap)), str(delay_us)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
      )
    )
  try:
    outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
        p.wait()
    os.unlink(script.name)
  return [(p.returncode, o) for p, o in zip(processes, outputs, strict=True)]


class WatchdogTest(absltest.TestCase):
  def test_a_call_past_the_limit_is_reported_and_one_in_time_is_not(self):
    done = test_util.run_python(ONE_PROCESS, timeout=TIMEOUT_S)
    self.assertEqual(done.returncode, 0, done.stderr)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    self.assertEqual(out["outside"], [])  # Only recording publishes.
    late, in_time = out["late"], out["in_time"]
    self.assertLen(late["hangs"], 1, late)
    report = late["hangs"][0]
    line = _line_of(ONE_PROCESS, "# THE CALL")
    self.assertIn("entangle_jax sanitizer watchdog", report)
    self.assertRegex(
      report,
      rf"thread \d+: entangle_jax_write_slot at <string>:{line} "
      # jax 0.6 names the module of a lambda jit__lambda_.
      r"\(jit__lambda_? native call #0.*\), in flight \d+\.\d s",
    )
    self.assertIn(report, done.stderr)  # Written as it happened.
    self.assertEqual(late["calls"], 1)
    # Control: the call returned within the limit.
    self.assertEqual(in_time["hangs"], [])
    self.assertEqual(in_time["calls"], 1)

  def test_the_merge_names_a_swap_and_the_hung_call_and_agrees_on_control(
    self,
  ):
    for swap in (True, False):
      with self.subTest(swap=swap), tempfile.TemporaryDirectory() as tmp:
        delay_us = 10_000_000 if swap else 0
        (s0, out0), (s1, out1) = run_ranks(tmp, swap, delay_us)
        merged = rank_calls.merge_sanitized_ranks(tmp)
        text = merged.text()
        if not swap:
          self.assertEqual((s0, s1), (0, 0), out0 + out1)
          self.assertTrue(merged.agree, text)
          self.assertEqual(merged.status, 0, text)
          self.assertEqual([len(r.calls) for r in merged.records], [2, 2], text)
          self.assertNotIn("watchdog", out0 + out1)
          continue
        # Rank 0's watchdog ended it; rank 1 made both calls and finished.
        self.assertEqual(s0, watchdog.HANG_EXIT_STATUS, out0)
        self.assertEqual(s1, 0, out1)
        self.assertIn("entangle_jax sanitizer watchdog (rank 0 of 2", out0)
        self.assertEqual(merged.status, 1, text)
        d = merged.divergence
        assert d is not None, text
        self.assertEqual(d.index, 0, text)
        first, other = d.calls
        assert first is not None and other is not None
        self.assertTrue(first.in_flight, text)
        self.assertEqual(first.signature, "(s32[2], f32[2]) -> s32[2]")
        self.assertEqual(other.signature, "(s32[4], f32[4]) -> s32[4]")
        self.assertTrue(first.source.endswith(f":{_line_of(RANK, '# SMALL')}"))
        self.assertTrue(
          other.source.endswith(f":{_line_of(RANK, '# RANK 1 LARGE FIRST')}")
        )
        self.assertEqual([r.rank for r in merged.hung], [0], text)
        self.assertIn("rank 0 HUNG; its watchdog reported:", text)
        hang = pathlib.Path(tmp, "rank0", rank_calls.HANG).read_text()
        self.assertIn("rank_allreduce", hang)


UNDER_PYTEST = textwrap.dedent(
  """
  import jax, jax.numpy as jnp
  from entangle_jax import testing

  with testing.sanitize():  # Starts it before the store registers.
    from entangle_jax.testing import example_store as store

  def test_a_call(delay_us={delay_us}):
    run = jax.jit(lambda s: store.write_slot(s, 1.0, delay_us=delay_us))
    with testing.sanitize(watchdog=0.3, on_hang="exit"):
      jax.block_until_ready(run(jnp.int32(3)))  # THE CALL
  """
)


class UnderPytestTest(absltest.TestCase):
  """Issue 77, defect 12: under pytest (its capture of fd 2 on, as by
  default) a watchdog that ends the process wrote its report into the
  capture, which ``os._exit`` threw away: no terminal saw it."""

  def run_suite(self, delay_us: int):
    with tempfile.TemporaryDirectory() as tmp:
      pathlib.Path(tmp, "test_hang.py").write_text(
        UNDER_PYTEST.format(delay_us=delay_us)
      )
      return test_util.pytest_run(tmp, "test_hang.py")

  def test_the_report_of_a_hang_reaches_the_real_stderr(self):
    done = self.run_suite(delay_us=3_000_000)
    self.assertEqual(done.returncode, watchdog.HANG_EXIT_STATUS, done.stdout)
    self.assertIn("entangle_jax sanitizer watchdog", done.stderr)
    self.assertRegex(done.stderr, r"entangle_jax_write_slot at \S*test_hang")

  def test_control_a_call_in_time_passes_without_a_report(self):
    done = self.run_suite(delay_us=20_000)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    self.assertNotIn("watchdog", done.stdout + done.stderr)


class ArgumentsTest(absltest.TestCase):
  def test_a_limit_that_is_not_positive_seconds_is_an_error_naming_it(self):
    from entangle_jax import testing

    bad_limits = (
      (0, ValueError), (-1.5, ValueError), ("5", TypeError), (True, TypeError)
    )  # fmt: skip
    for bad, error in bad_limits:
      with (
        self.subTest(bad=bad),
        self.assertRaisesRegex(error, "watchdog"),
        testing.sanitize(watchdog=cast(Any, bad)),
      ):
        pass
    with (
      self.assertRaisesRegex(ValueError, "on_hang.*'kill'"),
      testing.sanitize(watchdog=1, on_hang="kill"),
    ):
      pass
    with (
      self.assertRaisesRegex(
        TypeError, r"ranks=\.\.\.\) takes a folder's path"
      ),
      testing.sanitize(ranks=cast(Any, 3)),
    ):
      pass


if __name__ == "__main__":
  absltest.main()
