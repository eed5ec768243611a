"""laminar.testing (see docs/design.md)."""
