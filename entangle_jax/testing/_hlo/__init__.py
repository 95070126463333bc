"""Text in, instructions out: the optimized HLO module the analysis reads.

`module_text` gets the text of a ``Compiled``; `parse` reads it into a
`Module` of `Instruction` objects and refuses any text that is not an
optimized, scheduled module.
"""

from entangle_jax.testing._hlo.attributes import unescape
from entangle_jax.testing._hlo.instruction import Instruction
from entangle_jax.testing._hlo.module_text import CompiledModule, module_text
from entangle_jax.testing._hlo.parser import Module, parse

__all__ = [
  "CompiledModule",
  "Instruction",
  "Module",
  "module_text",
  "parse",
  "unescape",
]
