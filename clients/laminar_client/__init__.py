"""Smart gRPC client for Laminar (grows with the broker node issue)."""
