"""Puts ``tests/`` on the import path (pytest's prepend mode) so that every test file can import the shared test
helpers that live here (``tiny_shapes``)."""
