"""The sanitizer across ranks, on hand-made records: `merge_rank_records`
names the first call at which the ranks' communicating calls differ (or
says they agree), and ``python -m entangle_jax.testing --sanitized-ranks``
says the same of a folder of records. Each verdict beside its control:
the same calls in one order agree, the same calls with two swapped on one
rank differ at the swap.
"""

import dataclasses
import io
import json
import pathlib
import tempfile

from absl.testing import absltest

from entangle_jax import testing
from entangle_jax.testing._sanitize import rank_calls
from entangle_jax.testing._sanitize.rank_calls import (
  SanitizedRankCall,
  SanitizedRankRecord,
  merge_rank_records,
)
from entangle_jax.testing._ways_in import command

SMALL = "(f32[4]) -> f32[4]"
LARGE = "(f32[8]) -> f32[8]"


def call(index: int, signature: str, line: int, **more) -> SanitizedRankCall:
  return SanitizedRankCall(
    index=index,
    target="mpi_allreduce_ffi",
    kind="collective",
    signature=signature,
    source=f"prog.py:{line}",
    place=f"jit_step native call #{index}",
    thread=100,
    start_ns=1000 * (index + 1),
    **more,
  )


def record(
  rank: int, *signatures: str, launch: str = "L", state: str = rank_calls.ENDED
) -> SanitizedRankRecord:
  """A rank's record of allreduces of `signatures` in order, each made at
  line 10 when small and 11 when large."""
  calls = tuple(
    call(k, s, 10 if s == SMALL else 11) for k, s in enumerate(signatures)
  )
  return SanitizedRankRecord(rank, 2, launch, state, calls)


class MergeTest(absltest.TestCase):
  def test_the_same_calls_agree_and_a_swap_is_named_at_its_call(self):
    agree = merge_rank_records(
      [record(0, SMALL, LARGE), record(1, SMALL, LARGE)]
    )
    self.assertTrue(agree.agree)
    self.assertEqual(agree.status, 0)
    self.assertIsNone(agree.divergence)
    self.assertIn("agree: 2 call(s) on each rank", agree.text())

    swapped = merge_rank_records(
      [record(0, SMALL, LARGE), record(1, LARGE, SMALL)]
    )
    self.assertFalse(swapped.agree)
    self.assertEqual(swapped.status, 1)
    d = swapped.divergence
    assert d is not None
    self.assertEqual(d.index, 0)
    self.assertEqual(d.ranks, (0, 1))
    self.assertEqual([c.signature for c in d.calls if c], [SMALL, LARGE])
    text = swapped.text()
    self.assertIn("DIFFER at call 0", text)
    self.assertIn(f"rank 0: call 0: collective mpi_allreduce_ffi {SMALL} at "
                  "prog.py:10", text)  # fmt: skip
    self.assertIn(f"rank 1: call 0: collective mpi_allreduce_ffi {LARGE} at "
                  "prog.py:11", text)  # fmt: skip

  def test_the_first_difference_is_named_after_the_calls_that_agree(self):
    merged = merge_rank_records(
      [record(1, SMALL, SMALL, LARGE), record(0, SMALL, SMALL, SMALL)]
    )
    assert merged.divergence is not None
    self.assertEqual(merged.divergence.index, 2)
    self.assertEqual([r.rank for r in merged.records], [0, 1])

  def test_another_target_at_one_step_differs_even_of_one_signature(self):
    other = record(1, SMALL)
    other = dataclasses.replace(
      other,
      calls=(dataclasses.replace(other.calls[0], target="mpi_bcast_ffi"),),
    )
    self.assertFalse(merge_rank_records([record(0, SMALL), other]).agree)
    same = merge_rank_records([record(0, SMALL), record(1, SMALL)])
    self.assertTrue(same.agree)  # Control: one target, one signature.

  def test_a_rank_that_made_fewer_calls_differs_at_its_end(self):
    merged = merge_rank_records([record(0, SMALL, LARGE), record(1, SMALL)])
    d = merged.divergence
    assert d is not None
    self.assertEqual(d.index, 1)
    self.assertIsNone(d.calls[1])
    self.assertIn("rank 1: made no call 1 (its record ends after 1 call(s))",
                  merged.text())  # fmt: skip

  def test_a_hung_rank_is_reported_with_its_call_in_flight(self):
    report = "entangle_jax sanitizer watchdog (rank 0 of 2): ...\n  thread 7"
    in_flight = call(0, SMALL, 10, in_flight=True, seconds=5.0)
    hung = SanitizedRankRecord(
      0, 2, "L", rank_calls.HUNG, (in_flight,), hang=report
    )
    merged = merge_rank_records([hung, record(1, LARGE, SMALL)])
    self.assertEqual(merged.status, 1)
    self.assertEqual([r.rank for r in merged.hung], [0])
    text = merged.text()
    self.assertIn("IN FLIGHT for 5.0 s", text)
    self.assertIn("rank 0 HUNG; its watchdog reported:", text)
    self.assertIn("    thread 7", text)
    # Control: the same calls, none in flight, no report.
    self.assertEqual(
      merge_rank_records([record(0, SMALL), record(1, SMALL)]).status, 0
    )

  def test_missing_and_stale_ranks_are_named_and_not_compared(self):
    missing = merge_rank_records([record(0, SMALL)])
    self.assertEqual(missing.missing, (1,))
    self.assertEqual(missing.status, 2)
    self.assertIn("no record of rank(s) 1", missing.text())
    stale = merge_rank_records(
      [record(0, SMALL), record(1, LARGE, launch="earlier")]
    )
    self.assertEqual(stale.stale, (1,))
    self.assertIsNone(stale.divergence)  # Its calls were not compared.
    self.assertEqual(stale.status, 2)

  def test_a_rank_that_died_in_a_block_is_no_agreement(self):
    # Rank 1 wrote its record as the block began, and never again (an MPI
    # abort): its calls end where the block began.
    died = record(1, SMALL, state=rank_calls.RUNNING)
    merged = merge_rank_records([record(0, SMALL, LARGE), died])
    self.assertIsNone(merged.divergence)  # Its later calls are unknown.
    self.assertEqual(merged.unfinished, (1,))
    self.assertFalse(merged.agree)
    self.assertEqual(merged.status, 2)
    self.assertIn("rank(s) 1 began a sanitize block that never ended",
                  merged.text())  # fmt: skip
    # What it did record is still compared.
    wrong = merge_rank_records(
      [record(0, SMALL, LARGE), record(1, LARGE, state=rank_calls.RUNNING)]
    )
    assert wrong.divergence is not None
    self.assertEqual(wrong.divergence.index, 0)
    self.assertEqual(wrong.status, 1)

  def test_no_call_recorded_is_nothing_proved(self):
    # Issue 77, defect 11: mpi4jax imported before sanitize() leaves every
    # record empty; that is blindness, not agreement.
    blind = merge_rank_records([record(0), record(1)])
    self.assertFalse(blind.agree)
    self.assertTrue(blind.blind)
    self.assertEqual(blind.status, 2)
    self.assertIn("NOTHING PROVED", blind.text())
    self.assertNotIn("calls agree", blind.text())
    # Control: one call on each rank is compared, and agrees.
    seen = merge_rank_records([record(0, SMALL), record(1, SMALL)])
    self.assertFalse(seen.blind)
    self.assertTrue(seen.agree)
    self.assertEqual(seen.status, 0)

  def test_a_hung_rank_never_agrees(self):
    # Issue 77, defect 11: a hung ring (each rank's one call in flight,
    # the same call) said "agree": true with status 1.
    report = "entangle_jax sanitizer watchdog (rank 0 of 2): ..."
    hung = [
      SanitizedRankRecord(
        r,
        2,
        "L",
        rank_calls.HUNG,
        (call(0, SMALL, 10, in_flight=True, seconds=4.0),),
        hang=report,
      )
      for r in (0, 1)
    ]
    merged = merge_rank_records(hung)
    self.assertIsNone(merged.divergence)
    self.assertEqual(merged.status, 1)
    self.assertFalse(merged.agree)
    self.assertFalse(json.loads(json.dumps(merged.to_json()))["agree"])
    self.assertIn("proves nothing", merged.text())
    # Control: the same calls, returned, agree.
    done = merge_rank_records([record(0, SMALL), record(1, SMALL)])
    self.assertTrue(done.to_json()["agree"])

  def test_two_records_of_one_rank_are_an_error_naming_it(self):
    with self.assertRaisesRegex(ValueError, "two records of rank 1"):
      merge_rank_records([record(1, SMALL), record(1, SMALL)])

  def test_a_record_round_trips_through_json(self):
    hung = SanitizedRankRecord(
      0, 2, "L", rank_calls.HUNG,
      (call(0, SMALL, 10, in_flight=True, seconds=1.5),), hang="x", final=True,
    )  # fmt: skip
    data = json.loads(json.dumps(hung.to_json()))
    self.assertEqual(SanitizedRankRecord.from_json(data, "here"), hung)
    with self.assertRaisesRegex(ValueError, "here: not an entangle_jax"):
      SanitizedRankRecord.from_json({"format": 0}, "here")
    with self.assertRaisesRegex(ValueError, "there: a malformed rank record"):
      SanitizedRankRecord.from_json({**data, "calls": [{"index": 0}]}, "there")


def p2p(
  index: int, kind: str, peer: int, line: int, **more
) -> SanitizedRankCall:
  """A send (to `peer`) or receive (from `peer`, below 0: any)."""
  return dataclasses.replace(
    call(index, SMALL, line, **more),
    target=f"mpi_{kind}_ffi",
    kind=kind,
    peer=peer,
    tag=0,
  )


def bcast(index: int, root: int, is_root: bool) -> SanitizedRankCall:
  """mpi4jax's bcast: the root's call and the others' have other types."""
  types = "(f32[4]) -> f32[4]" if is_root else "(f32[4]) -> f32[0]"
  return dataclasses.replace(
    call(index, types, 20), target="mpi_bcast_ffi", root=f"root={root}"
  )


def ranks_of(*per_rank: tuple[SanitizedRankCall, ...]) -> list:
  return [
    SanitizedRankRecord(r, len(per_rank), "L", rank_calls.ENDED, calls)
    for r, calls in enumerate(per_rank)
  ]


class PairingTest(absltest.TestCase):
  """Issue 77, defects 9 and 10: the merge pairs a send with its receive,
  as MPI does, and compares a rooted collective's root, letting the
  root's types differ from the others'."""

  def test_a_send_meets_its_receive(self):
    # Rank 0 sends then receives; rank 1 receives then sends: right.
    right = merge_rank_records(
      ranks_of(
        (p2p(0, "send", 1, 30), p2p(1, "recv", 1, 31)),
        (p2p(0, "recv", 0, 40), p2p(1, "send", 0, 41)),
      )
    )
    self.assertTrue(right.agree, right.text())
    self.assertEqual(right.status, 0)

  def test_both_ranks_receiving_first_differ(self):
    # Control: both receive first, each waits for the other.
    stuck = merge_rank_records(
      ranks_of(
        (p2p(0, "recv", 1, 30), p2p(1, "send", 1, 31)),
        (p2p(0, "recv", 0, 40), p2p(1, "send", 0, 41)),
      )
    )
    self.assertFalse(stuck.agree)
    self.assertEqual(stuck.status, 1)
    assert stuck.divergence is not None
    self.assertEqual([c.kind for c in stuck.divergence.calls if c],
                     ["recv", "recv"])  # fmt: skip

  def test_a_receive_from_any_rank_meets_a_send(self):
    merged = merge_rank_records(
      ranks_of((p2p(0, "recv", -1, 30),), (p2p(0, "send", 0, 40),))
    )
    self.assertTrue(merged.agree, merged.text())

  def test_a_bcast_with_one_root_agrees_though_its_types_differ(self):
    merged = merge_rank_records(
      ranks_of((bcast(0, 0, True),), (bcast(0, 0, False),))
    )
    self.assertTrue(merged.agree, merged.text())

  def test_a_bcast_where_each_rank_names_itself_root_differs(self):
    # Each rank names itself: every rank thinks it sends, wrong values.
    merged = merge_rank_records(
      ranks_of((bcast(0, 0, True),), (bcast(0, 1, True),))
    )
    self.assertFalse(merged.agree, merged.text())
    self.assertEqual(merged.status, 1)

  def test_the_others_of_one_root_must_agree_with_each_other(self):
    other = dataclasses.replace(bcast(0, 0, False), signature=LARGE)
    merged = merge_rank_records(
      ranks_of((bcast(0, 0, True),), (bcast(0, 0, False),), (other,))
    )
    self.assertEqual(merged.status, 1, merged.text())


class FolderAndCommandTest(absltest.TestCase):
  def write(self, root: pathlib.Path, *records: SanitizedRankRecord) -> None:
    for r in records:
      folder = root / f"rank{r.rank}"
      folder.mkdir(parents=True, exist_ok=True)
      (folder / rank_calls.RECORD).write_text(json.dumps(r.to_json()))

  def run_command(self, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = command.main(list(args), out=out, err=err)
    return status, out.getvalue(), err.getvalue()

  def test_the_command_names_the_swap_and_passes_the_control(self):
    for swap in (False, True):
      with self.subTest(swap=swap), tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        second = (LARGE, SMALL) if swap else (SMALL, LARGE)
        self.write(root, record(0, SMALL, LARGE), record(1, *second))
        merged = testing.merge_sanitized_ranks(root)
        self.assertEqual(merged.agree, not swap)
        status, out, _ = self.run_command("--sanitized-ranks", tmp)
        self.assertEqual(status, 1 if swap else 0, out)
        self.assertEqual(out.strip(), merged.text())
        status, out, _ = self.run_command(
          "--sanitized-ranks", tmp, "--format", "json"
        )
        data = json.loads(out)
        self.assertEqual(data["status"], status)
        if swap:
          self.assertEqual(data["divergence"]["index"], 0)
          calls = [c["call"]["source"] for c in data["divergence"]["calls"]]
          self.assertEqual(calls, ["prog.py:10", "prog.py:11"])
        else:
          self.assertIsNone(data["divergence"])

  def test_the_command_says_nothing_proved_when_nothing_was_recorded(self):
    with tempfile.TemporaryDirectory() as tmp:
      self.write(pathlib.Path(tmp), record(0), record(1))
      status, out, _ = self.run_command("--sanitized-ranks", tmp)
      self.assertEqual(status, 2, out)
      self.assertIn("NOTHING PROVED", out)
      status, out, _ = self.run_command(
        "--sanitized-ranks", tmp, "--format", "json"
      )
      data = json.loads(out)
      self.assertEqual((data["status"], data["agree"]), (2, False))

  def test_a_missing_folder_or_a_bad_record_cannot_be_answered(self):
    with tempfile.TemporaryDirectory() as tmp:
      status, _, err = self.run_command("--sanitized-ranks", f"{tmp}/none")
      self.assertEqual(status, 2)
      self.assertIn("no such folder of rank records", err)
      (pathlib.Path(tmp) / "rank0").mkdir()
      (pathlib.Path(tmp) / "rank0" / rank_calls.RECORD).write_text("{")
      status, _, err = self.run_command("--sanitized-ranks", tmp)
      self.assertEqual(status, 2)
      self.assertIn("rank0", err)
      self.assertIn("not JSON", err)

  def test_the_flag_takes_no_paths_and_no_other_format(self):
    for args in (["x", "--sanitized-ranks", "d"],
                 ["--sanitized-ranks", "d", "--format", "sarif"]):  # fmt: skip
      with self.subTest(args=args), self.assertRaises(SystemExit) as raised:
        self.run_command(*args)
      self.assertEqual(raised.exception.code, 2)


class SignatureTest(absltest.TestCase):
  def test_the_custom_calls_types_are_read_without_layouts(self):
    line = (
      "  ROOT ffi_call.1 = s32[2]{0} custom-call(s.1, v.1), "
      'custom_call_target="t", operand_layout_constraints={s32[2]{0}, '
      "f32[2,3]{1,0}}, api_version=API_VERSION_TYPED_FFI, "
      "backend_config={entangle_jax_sanitize_site = 0 : i64}"
    )
    self.assertEqual(rank_calls._types(line), "(s32[2], f32[2,3]) -> s32[2]")
    # Control: a line without its operands' types says nothing.
    self.assertEqual(rank_calls._types(line.split(" operand_layout")[0]), "")


if __name__ == "__main__":
  absltest.main()
