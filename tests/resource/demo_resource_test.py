"""The demo's Resource part: the entangle row written with `Resource`."""

from absl.testing import absltest

from entangle_jax import demo


class DemoResourceTest(absltest.TestCase):
  def test_summary(self):
    self.assertRegex(
      demo.resource_summary(20),
      r"^Resource: 0 of 20 reads wrong; compiled HLO: read -> second write "
      r"ordered; entangle calls: 1 \(hand-written: 1\)$",
    )

  def test_side_by_side_lines_up(self):
    lines = demo.render_side_by_side().splitlines()
    self.assertLen(lines, len(demo.SIDE_BY_SIDE))
    columns = {
      line.index(right)
      for line, (_, right) in zip(lines, demo.SIDE_BY_SIDE, strict=True)
    }
    self.assertLen(columns, 1)


if __name__ == "__main__":
  absltest.main()
