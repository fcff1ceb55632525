"""Loops for other programs: served graphs (`graphs`), `configurable` loops, `tool`s."""
