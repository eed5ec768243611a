"""Laminar: a peer-to-peer clustered, partitioned log broker."""

__version__ = "0.1.0"
