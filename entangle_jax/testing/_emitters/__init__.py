"""Stage 5, emitters: the findings records in, words out.

Every emitter reads only the records of `entangle_jax.testing._findings`
(never the HLO, the order or the analysis stages), through one signature,
``render(run, options) -> str``, and `formats.FORMATS` is the one table
the ways in choose from: `text` (what people read), `json_report`
(``json``: every pair, raw object values too), `github` (workflow-command
annotations on the user's lines), `sarif` (SARIF 2.1.0 for GitHub code
scanning). `sentences` holds what several say of a run as a whole;
`graph_formats` writes the order graph's records as DOT or Mermaid.
The cross-rank check (``--ranks``) has its own records
(`_findings.rank_findings.RankRun`), and every format writes them too,
from the same table.
"""
