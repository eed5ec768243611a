"""The broker node: gRPC services, peer transport and the composition root."""
