"""Stage 4, findings in, words and pictures out.

`findings` computes, once, what the check found: each race's cause, its
group and fix, the declarations applied, per-module results and the run
summary, as data. Emitters render it: `race_text` (text, what every way
in prints), `race_json` (``--format json``), `github` (``--format
github``: workflow-command annotations on the user's line). `platforms`
reads a module's platform from its dump file's name (``CUDA sm_90a``) and
says which runtime's model the check applied. The order graph
(`order_graph`) is drawn in DOT or Mermaid (`graph_formats`).
"""
