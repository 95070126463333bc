"""Stage 4, findings: what the check found, as plain records.

`records` holds them (calls, pairs, causes with stable codes, findings,
module results, the run), `causes` the table of causes and their codes,
and `from_analysis`, the one module that reads the analysis's `Op` and
`Race` and the user's source lines, builds them. `platforms` reads a
module's platform from its dump file's name (``CUDA sm_90a``) and says
which runtime's model the check applied. `rank_findings` holds the
cross-rank check's findings (``--ranks``), with their ``EJ1xx`` codes.
"""
