"""laminar.replica (see docs/design.md)."""
