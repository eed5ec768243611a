"""ACL check benchmark: the cost of one authorization check with 10,000 ACLs.

Run from the repository root::

    .venv/bin/python -m bench.acl_bench [--acls N] [--checks N] [--runs N]

The ACL set mixes what a cluster holds: literal topic ACLs of 1,000 principals,
prefixed ones (prefixes of 3 to 12 characters), group ACLs, ``User:*`` ACLs and
denials. Checks are drawn (seeded) from principals, operations and topic names
that hit and miss. Two figures, medians over ``--runs``:

- ``acl_check_us``: one check as a busy connection pays it, the same few checks
  over and over (the authorizer remembers recent answers until the ACLs change);
  target <= 5 (issue 31);
- ``acl_check_uncached_us``: one check decided from the index every time (a new
  principal or topic, or right after an ACL change); also target <= 5.

Also ``acl_index_build_ms`` (after any ACL change, on the next check). Prints a
line per figure, then ``targets missed: ...`` and one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import time

from laminar.security.acl import Acl, Authorizer

OPERATIONS = ("read", "write", "describe")
TARGET_US = 5.0


def make_acls(count: int, rng: random.Random) -> list[Acl]:
    acls: list[Acl] = []
    principals = [f"User:user-{index:04d}" for index in range(1000)]
    while len(acls) < count:
        kind = rng.random()
        principal = rng.choice(principals)
        operation = rng.choice(OPERATIONS)
        if kind < 0.55:
            acls.append(Acl(principal, operation, "topic", _topic(rng)))
        elif kind < 0.8:
            prefix = _topic(rng)[: rng.randint(3, 12)]
            acls.append(Acl(principal, operation, "topic", prefix, "prefixed"))
        elif kind < 0.9:
            acls.append(Acl(principal, "read", "group", f"group-{rng.randrange(5000)}"))
        elif kind < 0.95:
            acls.append(Acl("User:*", "describe", "topic", _topic(rng)))
        else:
            acls.append(Acl(principal, operation, "topic", _topic(rng), permission="deny"))
    return acls


def _topic(rng: random.Random) -> str:
    team = "".join(rng.choices(string.ascii_lowercase, k=4))
    return f"{team}.events-{rng.randrange(100)}"


def _checks(count: int, rng: random.Random, acls: list[Acl]) -> list[tuple[str, str, str, str]]:
    checks = []
    for _ in range(count):
        if rng.random() < 0.5:
            acl = rng.choice(acls)  # a resource and principal some ACL names
            name = acl.resource_name + ("x" if acl.pattern == "prefixed" else "")
            checks.append((acl.principal, rng.choice(OPERATIONS), acl.resource_type, name))
        else:
            principal = f"User:user-{rng.randrange(1200):04d}"
            checks.append((principal, rng.choice(OPERATIONS), "topic", _topic(rng)))
    return checks


def one_run(acl_count: int, check_count: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    acls = make_acls(acl_count, rng)
    authorizer = Authorizer(enabled=True, decisions_kept_max=1)  # nothing remembered
    started = time.perf_counter()
    authorizer.update(1, acls)
    build_ms = (time.perf_counter() - started) * 1000
    checks = _checks(check_count, rng, acls)
    check = authorizer.check
    started = time.perf_counter()
    allowed = sum(check(*args).allowed for args in checks)
    uncached_us = (time.perf_counter() - started) / len(checks) * 1e6
    assert 0 < allowed < len(checks), allowed  # both answers occur
    cached = Authorizer(enabled=True)
    cached.update(1, acls)
    hot = checks[:64] * (len(checks) // 64)  # a connection's few checks, repeated
    for args in hot[:64]:
        cached.check(*args)
    started = time.perf_counter()
    for args in hot:
        cached.check(*args)
    cached_us = (time.perf_counter() - started) / len(hot) * 1e6
    return {
        "acl_check_us": cached_us,
        "acl_check_uncached_us": uncached_us,
        "acl_index_build_ms": build_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--checks", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = [one_run(args.acls, args.checks, seed) for seed in range(args.runs)]
    figures = {name: round(statistics.median(r[name] for r in runs), 3) for name in runs[0]}
    figures["acls"] = args.acls
    for name, value in figures.items():
        print(f"{name:24} {value}")
    missed = [
        name for name in ("acl_check_us", "acl_check_uncached_us") if figures[name] > TARGET_US
    ]
    print(f"targets missed: {', '.join(missed) or 'none'}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
