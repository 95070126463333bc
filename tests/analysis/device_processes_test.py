"""Copies of one call on two devices of different processes share no
process-wide state (issue 70): the device rule's pairs (EJ003, "on
another device") are left out, with the reason, where each device of the
module is in a process of its own; two devices of one process still race.

One process cannot hold devices of two processes, so the map is given
where the analysis consults it: a ``Compiled`` whose shardings name
devices with another ``process_index`` (its class's ``input_shardings``
patched for the test), or the command's ``--processes`` on a stored
module; each with its control on one process."""

import contextlib
import io
import json
import pathlib
import tempfile
from unittest import mock

import jax
import jax.numpy as jnp
from absl.testing import absltest
from jax.experimental import io_callback

from entangle_jax import testing
from entangle_jax._src.conflict_rule import APART_REASON
from entangle_jax.testing._analysis import device_processes
from entangle_jax.testing._analysis.device_processes import ProcessMap
from entangle_jax.testing._ways_in import command
from tests.hand_written_hlo import hlo_module, native

CALLBACK = "xla_ffi_python_cpu_callback"


def two_device_module() -> str:
  """A host callback in a module on two devices (num_partitions=2): the
  device rule pairs it with its copy on the other device."""
  return hlo_module(
    "%p = s32[] parameter(0)\n"
    + native("cb", "p").replace('"cb"', f'"{CALLBACK}"')
  ).replace("is_scheduled=true", "is_scheduled=true, num_partitions=2")


def compiled_callback() -> jax.stages.Compiled:
  """An io_callback under shard_map over two CPU devices, compiled."""
  mesh = jax.sharding.Mesh(jax.devices()[:2], ("x",))
  spec = jax.sharding.PartitionSpec("x")

  def body(x):
    io_callback(lambda v: None, None, x, ordered=False)
    return x * 2

  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
  shape = jax.ShapeDtypeStruct(
    (4,), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, spec)
  )
  return f.lower(shape).compile()


class FakeDevice:
  def __init__(self, id_: int, process_index: int):
    self.id = id_
    self.process_index = process_index

  def __hash__(self):
    return self.id


class FakeSharding:
  def __init__(self, *devices: FakeDevice):
    self.device_set = set(devices)


@contextlib.contextmanager
def in_processes(compiled, *processes: int):
  """`compiled`'s class reports shardings (of its inputs and outputs) on
  devices 0, 1, ... in `processes`."""
  devices = [FakeDevice(k, p) for k, p in enumerate(processes)]
  with contextlib.ExitStack() as stack:
    for name in ("input_shardings", "output_shardings"):
      shardings = mock.PropertyMock(return_value=([FakeSharding(*devices)], {}))
      stack.enter_context(
        mock.patch.object(
          type(compiled), name, new_callable=lambda s=shardings: s
        )
      )
    yield


class CompiledTest(absltest.TestCase):
  def test_devices_of_two_processes_leave_the_pair_out(self):
    compiled = compiled_callback()
    with in_processes(compiled, 0, 1):
      found = testing.races(compiled)
    self.assertEqual(list(found), [])
    (left,) = found.left_out
    self.assertTrue(left.race.across_devices)
    self.assertEqual(left.pair.reason, APART_REASON)
    self.assertEqual(
      left.pair.source, f"{device_processes.COMPILED_SOURCE} (0, 1)"
    )
    report = testing.format_races(found, left_out=found.left_out)
    self.assertIn("on devices of different processes", report)

  def test_control_two_devices_of_one_process_race(self):
    compiled = compiled_callback()
    with in_processes(compiled, 0, 0):
      found = testing.races(compiled)
    (race,) = found
    self.assertTrue(race.across_devices)
    self.assertEqual(found.left_out, ())
    # And as JAX reports them, unpatched: one process here.
    (race,) = testing.races(compiled)
    self.assertTrue(race.across_devices)

  def test_the_map_is_read_from_the_devices(self):
    compiled = compiled_callback()
    with in_processes(compiled, 1, 0):
      found = device_processes.of_compiled(compiled)
    assert found is not None
    self.assertEqual(found.indices, (1, 0))
    self.assertEqual(found.source, device_processes.COMPILED_SOURCE)
    self.assertIsNone(device_processes.of_compiled("HloModule m"))


class ProcessMapTest(absltest.TestCase):
  def test_a_count_splits_the_devices_evenly_in_order(self):
    self.assertEqual(ProcessMap(count=2).for_devices(4), (0, 0, 1, 1))
    self.assertEqual(ProcessMap(count=4).for_devices(4), (0, 1, 2, 3))
    self.assertEqual(device_processes.parse("0,1,1").indices, (0, 1, 1))

  def test_bad_values_name_the_flag(self):
    for value in ("x", "0", "-1", "1,,2", ""):
      with self.assertRaisesRegex(ValueError, "--processes"):
        device_processes.parse(value)
    with self.assertRaisesRegex(ValueError, "--processes 3: .* 4 devices"):
      ProcessMap(count=3).for_devices(4)
    with self.assertRaisesRegex(ValueError, "--processes: .* 3 process"):
      ProcessMap(indices=(0, 1, 1)).for_devices(2)

  def test_the_analysis_applies_a_given_map(self):
    text = two_device_module()
    apart = testing.OrderAnalysis(text, processes=ProcessMap(count=2))
    self.assertEqual(list(apart.races()), [])
    self.assertLen(apart.races().left_out, 1)
    # Control: both devices in one process.
    together = testing.OrderAnalysis(text, processes=ProcessMap(count=1))
    self.assertLen(together.races(), 1)
    with self.assertRaisesRegex(TypeError, "ProcessMap"):
      testing.OrderAnalysis(text, processes=2)  # ty: ignore[invalid-argument-type]


class CommandTest(absltest.TestCase):
  def dump(self) -> str:
    folder = pathlib.Path(tempfile.mkdtemp())
    name = "module_0001.jit_step.cpu_after_optimizations.txt"
    (folder / name).write_text(two_device_module())
    return str(folder)

  def run_command(self, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = command.main(list(args), out=out, err=err)
    return status, out.getvalue(), err.getvalue()

  def test_processes_leave_the_pairs_out_with_the_reason(self):
    status, out, _ = self.run_command(self.dump(), "--processes", "2")
    self.assertEqual(status, 0, out)
    self.assertIn(APART_REASON, out)
    self.assertIn("from --processes 2", out)
    status, out, _ = self.run_command(
      self.dump(), "--processes", "0,1", "--json"
    )
    self.assertEqual(status, 0)
    (module,) = json.loads(out)["modules"]
    self.assertEqual(module["races"], [])
    (left,) = module["safe_pairs_left_out"]
    self.assertEqual(left["reason"], APART_REASON)

  def test_control_one_process_or_no_flag_races(self):
    for flags in ((), ("--processes", "1"), ("--processes", "0,0")):
      status, out, _ = self.run_command(self.dump(), *flags)
      self.assertEqual(status, 1, flags)
      self.assertIn("[EJ003]", out)

  def test_a_map_that_does_not_fit_leaves_the_module_unchecked(self):
    status, out, _ = self.run_command(self.dump(), "--processes", "3")
    self.assertEqual(status, 2)
    self.assertIn("--processes 3: the module runs on 2 devices", out)

  def test_a_bad_value_is_an_error_naming_the_flag(self):
    err = io.StringIO()
    with mock.patch("sys.stderr", err), self.assertRaises(SystemExit) as exit:
      command.main([self.dump(), "--processes", "two"])
    self.assertEqual(exit.exception.code, 2)
    self.assertIn("--processes: give a number of processes", err.getvalue())


if __name__ == "__main__":
  absltest.main()
