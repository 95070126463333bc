"""The run-time sanitizer: what the native calls of a program did.

A stage after the findings and their emitters (`_findings`, `_emitters`) and
before the ways in: `jax_hooks` (every private JAX name the sanitizer uses),
`wrapping` (FFI targets registered while it runs get recording trampolines),
`sites` (each wrapped call's place in its program), `calls` (the records, as
data), `checks` (races and contradictions from the records) and `session`
(`sanitize`, `Seen`)."""
