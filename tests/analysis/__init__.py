"""Tests of the order analysis: the rule table, edges, dataflow, conflicts,
selectors, parsing, reports and graphs."""
