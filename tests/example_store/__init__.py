"""Tests of the example store and the demo."""
