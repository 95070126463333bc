"""`in_program_order(f)`: every native call of `f` ordered as the program made
it, by `entangle` edges added to `f`'s traced program.

`f` is traced to a jaxpr, which is evaluated again equation by equation, each
in its own source line and named scopes. A native call is an ``ffi_call``, a
host callback that may have effects (``pure_callback`` is declared pure: it
is not one, for the race check either), or any other first-order primitive
whose lowering emits custom calls that are not JAX's and XLA's own kernels
(a binding's own primitive: klujax, jax-finufft, mpi4jax): such an equation
is lowered alone, once per primitive, params and input types, and its
custom calls read, with the inputs their operands are (`lowered`). Before
a native call is bound, its object operand is entangled with
the results of the earlier calls it conflicts with: a read after earlier
writes of an object it may touch, a write after earlier reads and writes of
one. What a call touches is what its target's declaration says
(`entangle_jax._src.targets`), or the ``Resource`` it was made through
(`entangle_jax._src.access_marker`); a target nothing declares may touch
anything. Edges that data already implies (the call's operands depend on the
earlier call's result) are left out, and one ``entangle`` takes all of a
call's witnesses.

Sub-programs with native calls are transformed too, each primitive by its
rule in `rules` (one module per family: nested calls inlined, loops,
conditionals, checkpoint, shard_map and custom derivatives rebuilt with
their public functions); `rules.registry.supported` lists them, and
docs/fixing_races.md shows that list. Any other primitive with a native
call inside raises.

Where the input that names a custom call's object cannot be read from the
lowering (the lowering computes that operand), the call is ordered against
every other native call. A primitive that cannot be lowered alone warns,
naming it, and is ordered as a call that may write anything; a call with no
input to entangle raises, naming it.

Modules: `api` (the transform: arguments in, results out), `interpreter`
(the evaluator: native calls ordered, what the rules share, and the books
it keeps from what each rule returns), `value_table` (what the evaluation
knows of each value), `call_log` (the calls it has recorded, and which a
new one must come after), `rules` (the ordering rule of each primitive, by
family, how each host callback's primitive takes a carrier, and their
registry), `rule_inputs` (what a rule reads, and the result it returns),
`values`
(helpers the interpreter and the rules share), `natives` (which equations
are native calls, which sub-programs hold one), `lowered` (what a
first-order equation lowers to), `touches` (what a call touches, when two
conflict), `dependence` (which results XLA must compute after which
calls).
"""

from entangle_jax._src.program_order.api import in_program_order

__all__ = ["in_program_order"]
