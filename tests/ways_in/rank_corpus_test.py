"""The generator of the cross-rank corpus (`benchmarks.rank_corpus`), not
its runs: those need ``mpirun`` and take about 10 s a program
(``python -m benchmarks.rank_corpus --size 160``, docs/multi_process.md
has its table). Here only what each seed draws, and the values the
unbroken program means, checked against MPI's rules by hand."""

import dataclasses

from absl.testing import absltest

from benchmarks import rank_corpus

SEEDS = range(200)


class GeneratorTest(absltest.TestCase):
  def test_each_seed_draws_one_program(self):
    for seed in SEEDS[:40]:
      self.assertEqual(
        rank_corpus.generate(seed), rank_corpus.generate(seed), seed
      )

  def test_half_are_correct_and_the_rest_broken_in_each_way(self):
    programs = [rank_corpus.generate(seed) for seed in SEEDS]
    correct = [p for p in programs if p.mutation is None]
    self.assertTrue(all(p.seed % 2 == 0 for p in correct))
    self.assertGreater(len(correct), len(programs) // 2 - 1)
    kinds = {p.mutation[0] for p in programs if p.mutation is not None}
    self.assertEqual(kinds, set(rank_corpus.MUTATIONS))
    self.assertEqual({p.nranks for p in programs}, {2, 3})

  def test_every_rank_runs_the_calls_and_every_step_has_a_value(self):
    for seed in SEEDS:
      program = rank_corpus.generate(seed)
      want = rank_corpus.expected(program)
      steps = {f"s{s[1]}" for call in program.calls for s in call}
      for rank in range(program.nranks):
        self.assertEqual(set(want[rank]), steps, seed)
        names = {name for name, _ in program.rank_calls(rank)}
        self.assertEqual(names, {f"call{k}" for k in range(len(program.calls))})

  def test_the_mutation_changes_what_some_rank_runs(self):
    for seed in SEEDS:
      program = rank_corpus.generate(seed)
      if program.mutation is None:
        continue
      unbroken = dataclasses.replace(program, mutation=None)
      ranks = range(program.nranks)
      self.assertNotEqual(
        [unbroken.rank_calls(r) for r in ranks],
        [program.rank_calls(r) for r in ranks],
        program.describe(),
      )

  def test_the_values_follow_mpi(self):
    """The reference's values by hand, for two ranks: an allreduce's sum,
    a bcast of the root's operand, a ring's neighbour, a reduce on its
    root only, and a cond whose decision takes its second branch."""
    x0, x1 = rank_corpus.rank_input(0), rank_corpus.rank_input(1)
    cases = [
      (("allreduce", 0, 2048, "f32", False, "sum"), (x0 + 1) + (x1 + 1)),
      (("bcast", 0, 2048, "f32", True, 1), x1 + 4),
      (("sendrecv", 0, 2048, "f32", False, 1, 0), x1 + 1),
      (("reduce", 0, 2048, "f32", False, 1), x0 + 1),
    ]
    for step, rank0 in cases:
      got = rank_corpus._expect_step(step, 2)[0]
      want = rank_corpus._summary(rank0[:2048])
      self.assertEqual(got.tolist(), want.tolist(), step)
    inner = ("allreduce", 1, 2048, "f32", False, "sum")
    cond = ("cond", 0, "shared", False, (inner,), ())
    self.assertEqual(rank_corpus._expect_step(cond, 2)[0].tolist(), [0.0] * 8)
    cond = ("cond", 0, "shared", True, (inner,), ())
    self.assertEqual(
      rank_corpus._expect_step(cond, 2)[0].tolist(),
      rank_corpus._expect_step(inner, 2)[0].tolist(),
    )


if __name__ == "__main__":
  absltest.main()
