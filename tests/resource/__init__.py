"""Tests of Resource: its API, properties and transformations."""
