"""The rule table: what the order analysis concludes from each HLO construct.

Every rule has a number and one text, its `Rule.text`; the code that
applies a rule cites it as ``rule N``, and ``docs/proving_order.md``
carries the same texts (``tests/order/rule_table_test.py`` checks the page
against `markdown`). Rules 1-5 hold for every instruction; rules 6 on
give one construct each its meaning as data (an `HloRule`): what it reads
of its operands, which elements of its result are operand elements passed
on unchanged, which operand each called computation's parameter is, how
the ops of its called computations relate, how the order graph frames
them, and how object identity follows a value back through it (its
`Identity`, which `identity.ObjectFinder` dispatches on), and what it does
to a value that may differ by device in an SPMD module (its `DeviceValue`,
which `identity._DeviceValues` dispatches on). `rule_for` finds the
construct's rule; an opcode no rule names gets rule 6, the conservative
default. Rules 18 on read and forward exactly as rule 6 and differ from it
only in their identity (18-21) or their device value (22 on).

Adding a construct is adding an `HloRule` to `HLO_RULES` and a case with
its control to the rule table's test (``docs/development.md``, "Adding an
HLO rule").
"""

from __future__ import annotations

import dataclasses
import enum
import functools

from entangle_jax.testing._hlo import Instruction


class Reads(enum.Enum):
  """What an instruction reads of its operands (edges: rule 1)."""

  ALL = "every element of every operand"
  ELEMENT = "only the element of its operand that it names"
  PASSES_ON = "nothing itself; who reads its result reads what it holds"
  CALLEES = "what its called computations read of their parameters"


class Forwards(enum.Enum):
  """Which elements of an instruction's result are operand elements passed
  on unchanged, so that reading them depends on the operand's producer."""

  NOTHING = "none: the instruction wrote its result"
  ELEMENTS = "element k of the result is operand k"
  ELEMENT = "the result is the element of operand 0 that it names"
  ROOTS = "those its called computations' roots hold unchanged"


class Parameters(enum.Enum):
  """Which operand each called computation's parameter is."""

  NONE = "no called computation reads the operands"
  SAME = "parameter k of each called computation is operand k"
  LOOP_STATE = "parameter 0 of condition and body is operand 0"
  BRANCH = "parameter 0 of branch b is operand b + 1; operand 0 is the index"


class Callees(enum.Enum):
  """How the ops of two of an instruction's computations relate (rule 4)."""

  OVERLAP = "may overlap"
  SEQUENCED = "sequenced: one runs, then the other, never both at once"
  EXCLUSIVE = "exclusive: one execution runs one of them"


class Identity(enum.Enum):
  """Which object a value of an instruction's result holds, followed back
  towards the value that holds the handle (`identity.ObjectFinder`)."""

  NEW_VALUE = "none seen through: the result is a value of its own"
  PASSES_ON = "operand 0's: the result holds the same handles"
  SAME_BYTES = "operand 0's, where both keep the default layout"
  TUPLE = "element k of the result holds what operand k holds"
  TUPLE_ELEMENT = "what the element of operand 0 that it names holds"
  CONSTANT = "its value: equal integer constants name one object"
  STATIC_ELEMENT = "a one-element static slice holds that element"
  PARAMETER = "what every caller passes for it, when all pass the same"
  CALL_RESULT = "entangle's payload, or the object it is declared to hand back"
  LOOP_CARRIED = "the initial state's, where the body hands it back"
  CALLEE_ROOT = "what its computation's root holds, parameters as passed"
  BRANCHES_AGREE = "what every branch's root holds, when all agree"
  BROADCAST_ONE = "each element holds the one element it broadcasts"


class DeviceValue(enum.Enum):
  """What an instruction does to values that may differ by device, in an
  SPMD module (`identity._DeviceValues`): whether its result is alike on
  every device, or built to hold another value on each."""

  UNKNOWN = "unknown: it may be alike or differ on each device"
  PARTITION_NUMBER = (
    "each device's own number, where the partitions are all the devices"
  )
  REPLICA_NUMBER = (
    "each device's own number, where the replicas are all the devices"
  )
  CONSTANT = "alike on every device"
  INDEX = "alike on every device (a 1-D one numbers its elements)"
  PARAMETER = (
    "an entry parameter is alike on every device when replicated or one "
    "element; a callee's is what every caller passes"
  )
  PASSES_ON = (
    "its operand's, where integers are no narrower and the elements keep "
    "their order"
  )
  UNIFORM_OF_INDEX = "its operand's, a numbering becoming merely alike"
  OFFSET = (
    "a device's number offset by a value alike everywhere is a device's "
    "number; values alike everywhere give one alike everywhere"
  )
  MASK = (
    "a device's number masked by a constant that keeps every device's "
    "low bits (`axis_index`) is a device's number"
  )
  SCALE = (
    "a device's number times a constant that keeps them apart (not zero, "
    "no product wrapping) is a device's number"
  )
  PICK = (
    "one element of a numbering picked by a device's number (a "
    "replicated array split over the devices) is a device's number"
  )
  ELEMENTWISE = "alike on every device when its operands are"
  CALLEE_ROOT = "what its computation's root is, parameters as passed"


class Framing(enum.Enum):
  """Where an instruction's work begins and ends (rule 3)."""

  SELF = "its own work"
  ASYNC_PAIR = "one piece of work from its *-start to its *-done"


@dataclasses.dataclass(frozen=True)
class Rule:
  """A numbered rule of the analysis, and its one text."""

  number: int
  title: str
  text: str


@dataclasses.dataclass(frozen=True)
class HloRule(Rule):
  """A rule that gives one HLO construct its meaning, as data."""

  opcodes: tuple[str, ...] = ()
  """The opcodes it covers; async rules also match by suffix (`rule_for`)."""
  reads: Reads = Reads.ALL
  forwards: Forwards = Forwards.NOTHING
  parameters: Parameters = Parameters.NONE
  callees: Callees = Callees.OVERLAP
  framing: Framing = Framing.SELF
  identity: Identity = Identity.NEW_VALUE
  device_value: DeviceValue = DeviceValue.UNKNOWN


GENERAL_RULES: tuple[Rule, ...] = (
  Rule(
    1,
    "Operands are the edges",
    "An op depends on the producers of the operand elements it reads, and on "
    "nothing else. XLA:CPU runs thunks concurrently on an execution graph "
    "built from their buffer uses, and GPU command buffers in concurrent "
    "mode order their commands by buffer uses too: a value one op writes "
    "and another reads is a buffer conflict, which orders the two. Nothing "
    "is concluded from the schedule's order, from `control-predecessors` "
    "(XLA:CPU's execution graph ignores them) or from side-effect flags.",
  ),
  Rule(
    2,
    "Zero-size values order nothing",
    "An element that holds no bytes is no edge: an empty buffer slice "
    "overlaps, so conflicts with, nothing, and XLA usually replaces such a "
    "value by an empty constant anyway.",
  ),
  Rule(
    3,
    "Work spans an async pair",
    "An op's work begins at its first instruction and ends at its last: "
    "the same instruction, or an async pair's start and done. One op "
    "happens before another when a chain of edges leads from the end of "
    "the first's work to the beginning of the second's.",
  ),
  Rule(
    4,
    "Instances meet where their call chains part",
    "An op in a called computation runs once per chain of call sites from "
    "the entry (an instance). Two instances are related at the first "
    "computation where their chains part: through two instructions of it, "
    "by rule 3; in two computations one instruction calls, as that "
    "instruction's rule says (sequenced, exclusive or overlapping); one "
    "inside a computation the other calls, they may overlap. A "
    "computation called from several places counts as ordered, or "
    "exclusive, only if it is at every call site; of an op under more "
    "than 64 chains nothing is concluded.",
  ),
  Rule(
    5,
    "One execution at a time",
    "Two ops of one computation are related within one execution of it "
    "(one loop iteration); two iterations are not compared: a loop runs "
    "one after the other. Computations the entry never runs are left out "
    "(XLA deletes them; only hand-written text has them). Where the module "
    "before optimization is at hand, it is the program's order: a pair it "
    "leaves unordered races whatever XLA's optimizer made of it, and a "
    "call XLA moved out of its loop, which then runs before every "
    "iteration, races with the loop's calls it conflicts with (`EJ008`).",
  ),
)

DEFAULT_RULE = HloRule(
  6,
  "Every other instruction reads all its operands",
  "An instruction no other rule names (arithmetic, collectives, sorts...) "
  "reads every element of every operand and writes its result; the ops of "
  "computations it calls (a reduce's `to_apply`) run as part of its work "
  "and may overlap one another. Object identity is not followed through "
  "it: its result is a value of its own.",
)

HLO_RULES: tuple[HloRule, ...] = (
  DEFAULT_RULE,
  HloRule(
    7,
    "A custom call reads all its operands",
    "A custom call (a native call, entangle's, a library kernel) reads "
    "every element of every operand, aliased ones included: its thunk "
    "lists every operand. Its result is a value of its own, except "
    "`entangle`'s payload, which holds the object its aliased operand "
    "holds, and a result declared to hand back the call's object "
    "(`returns_object`; a `Resource` write's next token), which holds "
    "that object.",
    opcodes=("custom-call",),
    identity=Identity.CALL_RESULT,
  ),
  HloRule(
    8,
    "A fusion reads all its operands",
    "A fusion reads every element of every operand; the ops of its fused "
    "computation are part of its work. Its result holds the objects its "
    "fused computation's root holds, a parameter there standing for the "
    "operand the fusion passed for it.",
    opcodes=("fusion",),
    identity=Identity.CALLEE_ROOT,
    device_value=DeviceValue.CALLEE_ROOT,
  ),
  HloRule(
    9,
    "Parameters are what the caller passed",
    "A parameter reads nothing. In a called computation it holds the "
    "operand the calling instruction passed (its rule's parameters), and "
    "the object that operand holds when every caller passes the same value "
    "(a loop's state element only when its body hands it back as the same "
    "object); an entry parameter is a value of its own.",
    opcodes=("parameter",),
    reads=Reads.PASSES_ON,
    identity=Identity.PARAMETER,
    device_value=DeviceValue.PARAMETER,
  ),
  HloRule(
    10,
    "A tuple passes its operands on",
    "A tuple reads nothing itself: element k of its result is operand k, "
    "so who reads an element depends on that operand's producer alone, "
    "however deeply tuples nest; element k holds the object operand k "
    "holds.",
    opcodes=("tuple",),
    reads=Reads.PASSES_ON,
    forwards=Forwards.ELEMENTS,
    identity=Identity.TUPLE,
  ),
  HloRule(
    11,
    "A get-tuple-element reads only its element",
    "A `get-tuple-element` depends on the producer of the element it names, "
    "not on the producers of the other elements, and holds the object that "
    "element holds.",
    opcodes=("get-tuple-element",),
    reads=Reads.ELEMENT,
    forwards=Forwards.ELEMENT,
    identity=Identity.TUPLE_ELEMENT,
  ),
  HloRule(
    12,
    "A bitcast passes its operand on",
    "A bitcast reads nothing itself: who reads it inside a called "
    "computation reads the operand (its result is the same bytes). Its "
    "result counts as written by it. It holds its operand's objects when "
    "both keep the default layout; a bitcast that changes the layout "
    "reorders the elements, so it is a value of its own.",
    opcodes=("bitcast",),
    reads=Reads.PASSES_ON,
    identity=Identity.SAME_BYTES,
    device_value=DeviceValue.PASSES_ON,
  ),
  HloRule(
    13,
    "A while loop reads what its condition and body read",
    "A while reads the elements of its state that its condition or body "
    "reads, and the predicate, even when the condition returns a state "
    "element as it is; an element the body only carries to the next "
    "iteration is not read. An element of its result is the initial one "
    "when the body's root holds the state element it was given at the "
    "same place; any other was written inside. Its condition and body are "
    "sequenced: the loop runs one, then the other. An element of its "
    "result that the body hands back as the same object holds the initial "
    "state's object; any other is a value of its own.",
    opcodes=("while",),
    reads=Reads.CALLEES,
    forwards=Forwards.ROOTS,
    parameters=Parameters.LOOP_STATE,
    callees=Callees.SEQUENCED,
    identity=Identity.LOOP_CARRIED,
  ),
  HloRule(
    14,
    "A conditional reads its index and what its branches read",
    "A conditional reads its branch index (or predicate), and of operand "
    "b + 1 what branch b reads. An element of its result that every "
    "branch passes on unchanged depends on those operands' producers; "
    "branches that differ make it depend on each. Its branches are "
    "exclusive: one execution runs one of them. An element of its result "
    "holds an object when every branch's root holds that one (a parameter "
    "there standing for the operand passed); else it is a value of its own.",
    opcodes=("conditional",),
    reads=Reads.CALLEES,
    forwards=Forwards.ROOTS,
    parameters=Parameters.BRANCH,
    callees=Callees.EXCLUSIVE,
    identity=Identity.BRANCHES_AGREE,
  ),
  HloRule(
    15,
    "A call reads what its computation reads",
    "A call reads of operand k what its computation reads of parameter k; "
    "an element its computation's root holds unchanged from a parameter "
    "depends on that operand's producer. Its result holds the objects its "
    "computation's root holds, a parameter there standing for the operand "
    "passed.",
    opcodes=("call",),
    reads=Reads.CALLEES,
    forwards=Forwards.ROOTS,
    parameters=Parameters.SAME,
    identity=Identity.CALLEE_ROOT,
    device_value=DeviceValue.CALLEE_ROOT,
  ),
  HloRule(
    16,
    "An async-start reads what its computation reads",
    "An `async-start` reads of operand k what its computation reads of "
    "parameter k. It begins an async pair (rule 17). Its result is a "
    "value of its own.",
    opcodes=("async-start",),
    reads=Reads.CALLEES,
    parameters=Parameters.SAME,
    framing=Framing.ASYNC_PAIR,
  ),
  HloRule(
    17,
    "An async pair is one piece of work",
    "A `*-start`, its `*-update` and its `*-done` (`async-start`, "
    "`async-update` and `async-done`; `send` and `send-done`; `recv` and "
    "`recv-done`; `all-reduce-start` and `all-reduce-done`; `copy-start` "
    "and `copy-done`...) are one piece of work, from the start to the done "
    "(rule 3): an op that depends on the start alone may overlap it. Each "
    "reads all its operands, except an `async-start` (rule 16). Their "
    "results are values of their own.",
    opcodes=("async-update", "async-done", "send", "recv"),
    framing=Framing.ASYNC_PAIR,
  ),
  # Rules 18 on read and forward as rule 6 does; they differ from it only
  # in what object identity does through them.
  HloRule(
    18,
    "A copy or a reshape passes the handle on",
    "A `copy` or a `reshape` reads every element of its operand and writes "
    "its result, as rule 6 says, but the result holds the same handles: "
    "its object is its operand's, and a one-element slice of it (rule 20) "
    "is the element of the operand at the same row-major position.",
    opcodes=("copy", "reshape"),
    identity=Identity.PASSES_ON,
    device_value=DeviceValue.PASSES_ON,
  ),
  HloRule(
    19,
    "A constant is its value",
    "A `constant` depends on nothing. As an object it is its value: an "
    "integer scalar (or one-element array) by its bits, so `s32` -1 and "
    "`u32` 4294967295, or `3` and `{3}`, name one object, and two "
    "different ones name different objects; any other constant by its "
    "text, which names one object when equal and proves nothing when not.",
    opcodes=("constant",),
    identity=Identity.CONSTANT,
    device_value=DeviceValue.CONSTANT,
  ),
  HloRule(
    20,
    "A one-element static slice is that element",
    "A `slice` reads all its operand, as rule 6 says. A static slice of "
    "one element holds that element of its operand's value (an element of "
    "an array of handles, which `distinct_elements` may declare distinct), "
    "also inside a fusion; a larger slice is a value of its own.",
    opcodes=("slice",),
    identity=Identity.STATIC_ELEMENT,
    device_value=DeviceValue.UNIFORM_OF_INDEX,
  ),
  HloRule(
    21,
    "A broadcast of one element holds it everywhere",
    "A `broadcast` reads all its operand, as rule 6 says. Each element of "
    "a broadcast of a single element holds that element's object (`vmap` "
    "of a call on one handle makes `[h, h, h]`), whatever "
    "`distinct_elements` declares: its elements are one object.",
    opcodes=("broadcast",),
    identity=Identity.BROADCAST_ONE,
    device_value=DeviceValue.UNIFORM_OF_INDEX,
  ),
  # Which values differ by device: rules 22 on read, forward and follow
  # identity as rule 6 does; they differ from it only in what they do to a
  # value that may differ by device (`DeviceValue`), which tells a handle
  # built to be another object on each device of an SPMD module.
  HloRule(
    22,
    "A partition-id numbers the devices",
    "A `partition-id` reads nothing and orders as rule 6 says. Where the "
    "module's partitions are all its devices, it is another number on each "
    "device; with several replicas, devices share numbers.",
    opcodes=("partition-id",),
    device_value=DeviceValue.PARTITION_NUMBER,
  ),
  HloRule(
    23,
    "A replica-id numbers the devices",
    "A `replica-id` reads nothing and orders as rule 6 says. Where the "
    "module's replicas are all its devices (one partition), it is another "
    "number on each device; the partitions of one replica share it.",
    opcodes=("replica-id",),
    device_value=DeviceValue.REPLICA_NUMBER,
  ),
  HloRule(
    24,
    "An iota is alike on every device",
    "An `iota` reads nothing and orders as rule 6 says. Every device holds "
    "the same one; a 1-D one holds element k's own number at k, so picking "
    "element k by a device's number (rule 29) gives another on each.",
    opcodes=("iota",),
    device_value=DeviceValue.INDEX,
  ),
  HloRule(
    25,
    "A convert passes a device's number on",
    "A `convert` orders as rule 6 says. Of a device's number (or a "
    "numbering) it is that number, where the integer type is no narrower "
    "and the elements keep their order; `copy`, `reshape` (rule 18) and "
    "`bitcast` (rule 12) do the same.",
    opcodes=("convert",),
    device_value=DeviceValue.PASSES_ON,
  ),
  HloRule(
    26,
    "An offset keeps the devices apart",
    "An `add`, a `subtract` or an `xor` of two operands orders as rule 6 "
    "says. A device's number offset by a value alike on every device is "
    "another on each device (a handle `h + axis_index`); of two values "
    "alike on every device, the result is too.",
    opcodes=("add", "subtract", "xor"),
    device_value=DeviceValue.OFFSET,
  ),
  HloRule(
    27,
    "A mask that keeps the low bits keeps the devices apart",
    "An `and` orders as rule 6 says. A device's number masked by a "
    "constant whose low bits are all set, as many as the numbers need "
    "(JAX's `axis_index`), is that number; a narrower mask folds devices "
    "together. Of values alike on every device, the result is too.",
    opcodes=("and",),
    device_value=DeviceValue.MASK,
  ),
  HloRule(
    28,
    "A scale that keeps the devices apart",
    "A `multiply` orders as rule 6 says. A device's number times a "
    "constant that is not zero and small enough that no product wraps (a "
    "shard's size: a split `iota` starts at `partition-id * n`) is another "
    "number on each device. Of values alike on every device, the result "
    "is too.",
    opcodes=("multiply",),
    device_value=DeviceValue.SCALE,
  ),
  HloRule(
    29,
    "A dynamic-slice picks a device's element",
    "A `dynamic-slice` reads all its operands, as rule 6 says. One element "
    "of a 1-D numbering (an `iota`, plus a value alike on every device) "
    "with at least one element per device, picked at a device's number, "
    "is another on each device: a replicated array split over the "
    "devices. Any slice of values alike on every device is alike too.",
    opcodes=("dynamic-slice",),
    device_value=DeviceValue.PICK,
  ),
  HloRule(
    30,
    "Elementwise arithmetic of alike values is alike",
    "An `or`, a `maximum`, a `minimum`, a `negate` or a `not` orders as "
    "rule 6 says. Of operands alike on every device its result is alike "
    "too; of a device's number, unknown.",
    opcodes=("or", "maximum", "minimum", "negate", "not"),
    device_value=DeviceValue.ELEMENTWISE,
  ),
)

_BY_OPCODE = {opcode: rule for rule in HLO_RULES for opcode in rule.opcodes}
_ASYNC_PAIR = _BY_OPCODE["send"]


@functools.cache
def rule_for(opcode: str) -> HloRule:
  """The rule that gives `opcode` its meaning (rule 6 if no other does).

  A pure function of the opcode, so cached for the process.
  """
  rule = _BY_OPCODE.get(opcode)
  if rule is not None:
    return rule
  if opcode.endswith(("-start", "-done")):
    return _ASYNC_PAIR
  return DEFAULT_RULE


def starts_async(opcode: str) -> bool:
  """Whether `opcode` begins an async pair's work (rule 3)."""
  return rule_for(opcode).framing is Framing.ASYNC_PAIR and not (
    continues_async(opcode)
  )


def continues_async(opcode: str) -> bool:
  """Whether `opcode` continues an async pair (an update, or its done)."""
  return opcode == "async-update" or ends_async(opcode)


def ends_async(opcode: str) -> bool:
  """Whether `opcode` ends an async pair's work (rule 3)."""
  return opcode.endswith("-done")


def callee_parameters(i: Instruction) -> list[tuple[int | None, str]]:
  """Which operand parameter 0 of each computation `i` calls is, as
  ``(operand, computation)``; ``None`` where parameter k is operand k
  (the rule's `Parameters`)."""
  parameters = rule_for(i.opcode).parameters
  if parameters is Parameters.SAME:
    return [(None, c) for c in i.callees]
  if parameters is Parameters.BRANCH:
    return list(enumerate(i.branches, start=1))
  if parameters is Parameters.LOOP_STATE:
    return [(0, c) for c in (i.condition, i.body) if c is not None]
  return []


def callee_role(i: Instruction, computation: str) -> str:
  """What `computation` is to `i`, which calls it, in the order graph's
  cluster labels: ``loop body``, ``branches 0, 2``, or `i`'s opcode."""
  callees = rule_for(i.opcode).callees
  if callees is Callees.SEQUENCED:
    return "loop body" if computation == i.body else "loop condition"
  if callees is Callees.EXCLUSIVE:
    # A computation may serve several branches (repeats are kept).
    branches = [str(k) for k, b in enumerate(i.branches) if b == computation]
    return f"{'branches' if len(branches) > 1 else 'branch'} " + ", ".join(
      branches
    )
  return i.opcode


def all_rules() -> tuple[Rule, ...]:
  """Every rule, by number."""
  return tuple(sorted((*GENERAL_RULES, *HLO_RULES), key=lambda r: r.number))


def markdown() -> str:
  """The rules as the Markdown list that ``docs/proving_order.md`` holds."""
  lines = []
  for rule in all_rules():
    opcodes = ""
    if isinstance(rule, HloRule) and rule.opcodes:
      opcodes = " (" + ", ".join(f"`{o}`" for o in rule.opcodes) + ")"
    device = ""
    if isinstance(rule, HloRule) and rule.device_value is not (
      DeviceValue.UNKNOWN
    ):
      device = f" Across devices: {rule.device_value.value}."
    lines.append(
      f"{rule.number}. **{rule.title}**{opcodes}. {rule.text}{device}"
    )
  return "\n".join(lines) + "\n"
