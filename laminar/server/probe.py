"""``python -m laminar.server.probe ADDR [--members N] [--timeout S]``: wait for a node.

Exits 0 once the node at ``ADDR`` answers a Metadata call and (with ``--members``)
sees at least N alive members; exits 1 with a message after the timeout. Used by
``scripts/local_cluster.sh`` to wait until a cluster is ready. ``--tls-ca`` (and
``--tls-cert``/``--tls-key`` where nodes require client certificates) for a node
serving TLS.
"""

from __future__ import annotations

import argparse
import sys
import time

import grpc

from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar.server.probe", description=__doc__)
    parser.add_argument("address", help="gRPC address host:port")
    parser.add_argument("--members", type=int, default=0, help="alive members to wait for")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument(
        "--tls-ca", default="", metavar="FILE", help="CA bundle: the node serves TLS"
    )
    parser.add_argument("--tls-cert", default="", metavar="FILE", help="client certificate")
    parser.add_argument("--tls-key", default="", metavar="FILE", help="key of --tls-cert")
    parser.add_argument(
        "--tls-server-name", default="", metavar="NAME", help="name the node's certificate holds"
    )
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    last = "no answer"
    with _channel(args) as channel:
        stub = laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]
        while time.monotonic() < deadline:
            try:
                response = stub.Metadata(pb.MetadataRequest(), timeout=1)
                alive = sum(1 for m in response.members if m.state == "alive")
                if alive >= args.members:
                    return 0
                last = f"{alive} alive members"
            except grpc.RpcError as error:
                last = error.details() or str(error.code())
            time.sleep(0.1)
    print(f"{args.address}: not ready after {args.timeout:.0f} s ({last})", file=sys.stderr)
    return 1


def _channel(args: argparse.Namespace) -> grpc.Channel:
    if not args.tls_ca:
        return grpc.insecure_channel(args.address)
    credentials = grpc.ssl_channel_credentials(
        _read(args.tls_ca), _read(args.tls_key) or None, _read(args.tls_cert) or None
    )
    options = [("grpc.ssl_target_name_override", args.tls_server_name)] * bool(args.tls_server_name)
    return grpc.secure_channel(args.address, credentials, options=options)


def _read(path: str) -> bytes:
    if not path:
        return b""
    with open(path, "rb") as file:
        return file.read()


if __name__ == "__main__":
    sys.exit(main())
