"""Generated gRPC code for proto/laminar/v1 (do not edit: scripts/check_generated.py --write)."""
