"""Instructions in, order out: what each op reads and writes, the edges
the runtime honours, and happens-before among the ops asked about.

Layers, each importing only those above it: `access` (what a call
touches), `bitsets` (sets of ops as ints), `ops` (`Op`, `Race`),
`call_graph` (call chains), `edges` (one computation's dependency edges),
`dataflow` (what called computations read and pass on), `reach`
(happens-before masks per op instance), `relations` (order questions about
a list of ops).
"""
