"""Stage 3, the facade: the questions a user asks of one module, answered
from the order stage's masks.

`order_analysis` (`OrderAnalysis`, and `ParsedModule`: what the text
alone decides, shared by every analysis of it), `ops` (`Op` and `Race`,
the answers), `selectors` (which ops a selector picks, which are
effectful, which are native calls), `source_lines` (the user's line of
an op, past library frames), `gc` (the cyclic collector paused while an
analysis runs). The cross-rank check is here too: `ranks` (one rank's
communicating calls), `across_ranks` (``races_across``,
`CrossRankResult`), `rank_groups` (ranks split into communicators of
their own) and `rank_sequences` (each rank's executions as one sequence).
"""
