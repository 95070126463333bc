"""Each host callback's record keeps its site and its numbers together
(`callbacks._timed`), whatever another thread does between them: a drain
(the block's end) or another call's record there paired one call's site
with another's thread and times."""

import threading

from absl.testing import absltest

from entangle_jax.testing._sanitize import callbacks


class DrainBetweenTest(absltest.TestCase):
  def test_a_drain_on_another_thread_waits_for_the_whole_record(self):
    callbacks.drain()
    finished = threading.Event()
    drained = []

    def drain() -> None:
      drained.append(callbacks.drain())
      finished.set()

    class Sites(list):
      """A site list whose append lets another thread drain, as a thread
      switch between the two appends would."""

      def append(self, site) -> None:
        super().append(site)
        threading.Thread(target=drain).start()
        finished.wait(0.5)

    callbacks._sites = Sites()
    ticks = iter(range(100, 200))
    out = callbacks._timed(
      lambda x: x + 1, (1,), {}, "site A", 7, lambda: next(ticks)
    )
    self.assertEqual(out, 2)
    finished.wait(5)
    late_sites, late_numbers = callbacks.drain()
    ((drained_sites, drained_numbers),) = drained
    sites = [*drained_sites, *late_sites]
    numbers = [*drained_numbers, *late_numbers]
    self.assertEqual(sites, ["site A"])
    self.assertLen(numbers, callbacks.FIELDS)
    # Each drain holds whole records: as many numbers as sites.
    self.assertLen(drained_numbers, callbacks.FIELDS * len(drained_sites))
    _, start, end, run_id, failed = numbers
    self.assertEqual((start, end, run_id, failed), (100, 101, 7, 0))


if __name__ == "__main__":
  absltest.main()
