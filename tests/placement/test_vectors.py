"""Test vectors that pin the placement function for every implementation.

``placement_vectors.json`` is the cross-language contract: a client in another
language hashes the same bytes, derives the same ``u`` and score (compared bit for
bit through ``float.hex``) and picks the same replicas. Regenerate it only when the
specification in ``laminar/placement/rendezvous.py`` changes on purpose::

    .venv/bin/python -m tests.placement.test_vectors --regenerate
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xxhash

from laminar.errors import InvalidInputError
from laminar.placement import (
    KEY_SEPARATOR_BYTES,
    PlacementMember,
    partition_key,
    replicas,
    score,
    unit_interval,
)

VECTORS_PATH = Path(__file__).with_name("placement_vectors.json")

SCORE_CASES = [
    ("orders/0", "node-a", 1.0),
    ("orders/0", "node-b", 1.0),
    ("orders/1", "node-a", 2.5),
    ("payments/17", "n1", 0.125),
    ("payments/17", "zürich-1", 8.0),
    ("café/3", "node-🚀", 1.0),
    ("", "x", 1.0),
    ("t/0", "node-a", 0.0),
]

MEMBERS = [
    {"node_id": "node-a", "weight": 1.0, "zone": "z1", "alive": True},
    {"node_id": "node-b", "weight": 1.0, "zone": "z1", "alive": True},
    {"node_id": "node-c", "weight": 2.0, "zone": "z2", "alive": True},
    {"node_id": "node-d", "weight": 1.0, "zone": "z2", "alive": True},
    {"node_id": "node-e", "weight": 4.0, "zone": "z3", "alive": True},
    {"node_id": "node-f", "weight": 0.0, "zone": "z3", "alive": True},
    {"node_id": "node-g", "weight": 1.0, "zone": "z4", "alive": False},
]
REPLICA_KEYS = [f"orders/{index}" for index in range(8)] + ["payments/17", "café/3"]


def _members() -> list[PlacementMember]:
    return [
        PlacementMember(
            str(fields["node_id"]),
            float(str(fields["weight"])),
            str(fields["zone"]),
            fields["alive"] is True,
        )
        for fields in MEMBERS
    ]


def compute_vectors() -> dict[str, Any]:
    """The vectors as the current implementation computes them."""
    scores = []
    for key, node_id, weight in SCORE_CASES:
        data = key.encode() + KEY_SEPARATOR_BYTES + node_id.encode()
        scores.append(
            {
                "key": key,
                "node_id": node_id,
                "weight": weight,
                "hashed_bytes_hex": data.hex(),
                "xxh3_64": f"{xxhash.xxh3_64_intdigest(data):016x}",
                "u": unit_interval(key, node_id),
                "u_hex": unit_interval(key, node_id).hex(),
                "score": score(node_id, weight, key),
                "score_hex": score(node_id, weight, key).hex(),
            }
        )
    members = _members()
    placements = [
        {"key": key, "k": k, "replicas": list(replicas(key, members, k))}
        for key in REPLICA_KEYS
        for k in (1, 3, 5)
    ]
    return {"scores": scores, "members": MEMBERS, "placements": placements}


def _pinned() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
    return loaded


def test_xxh3_variant_is_the_seed_zero_64_bit_one() -> None:
    # The reference XXH3_64bits of the empty input: guards against a seeded or
    # 128-bit variant creeping in.
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2


@pytest.mark.parametrize("index", range(len(SCORE_CASES)))
def test_score_vectors_are_pinned(index: int) -> None:
    assert compute_vectors()["scores"][index] == _pinned()["scores"][index]


def test_placement_vectors_are_pinned() -> None:
    assert compute_vectors()["placements"] == _pinned()["placements"]
    assert _pinned()["members"] == MEMBERS


def test_vector_spot_values() -> None:
    # A few literal values so a wrong regeneration of the JSON cannot go unnoticed.
    data = b"orders/0\x00node-a"
    assert xxhash.xxh3_64_intdigest(data) == 0xCA2610DE1BAF18AC
    expected_u = ((0xCA2610DE1BAF18AC >> 11) | 1) / 2**53
    assert unit_interval("orders/0", "node-a") == expected_u
    assert score("node-a", 2.0, "orders/0") == -2.0 / __import__("math").log(expected_u)


def test_u_is_strictly_inside_the_unit_interval_at_the_extremes() -> None:
    for digest in (0, 1, 2**11 - 1, 2**64 - 1, 2**64 - 2**11):
        u = ((digest >> 11) | 1) * 2.0**-53
        assert 0.0 < u < 1.0
    assert ((2**64 - 1) >> 11 | 1) * 2.0**-53 == 1.0 - 2.0**-53


def test_weight_zero_scores_zero_and_bad_weights_are_rejected() -> None:
    assert score("node-a", 0.0, "orders/0") == 0.0
    for weight in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError):
            score("node-a", weight, "orders/0")


def test_separator_byte_cannot_appear_in_keys_or_node_ids() -> None:
    with pytest.raises(InvalidInputError):
        unit_interval("a\x00b", "c")
    with pytest.raises(InvalidInputError):
        PlacementMember("b\x00c")
    with pytest.raises(InvalidInputError):
        PlacementMember("")


_CHILD_PROGRAM = """
import json
from laminar.placement import PlacementMember, partition_key, replicas, score
members = [PlacementMember(f"node-{i}", 1.0 + i % 3, f"zone-{i % 4}") for i in range(12)]
keys = [partition_key(f"topic-{t}", p) for t in range(3) for p in range(40)]
print(json.dumps({
    "replicas": [list(replicas(key, members, 3)) for key in keys],
    "scores": [score("node-1", 1.5, key).hex() for key in keys],
}))
"""


def _run_child(hash_seed: str) -> Any:
    environment = dict(os.environ, PYTHONHASHSEED=hash_seed)
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD_PROGRAM],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(completed.stdout)


@pytest.mark.process  # child interpreters
def test_same_answer_in_processes_with_different_hash_seeds() -> None:
    first = _run_child("0")
    second = _run_child("4242")
    assert first == second
    assert len(first["replicas"]) == 120
    assert all(len(chosen) == 3 for chosen in first["replicas"])
    # And the same answer as this process.
    members = [PlacementMember(f"node-{i}", 1.0 + i % 3, f"zone-{i % 4}") for i in range(12)]
    assert first["replicas"][0] == list(replicas(partition_key("topic-0", 0), members, 3))


if __name__ == "__main__":
    if "--regenerate" not in sys.argv:
        raise SystemExit("pass --regenerate to rewrite " + str(VECTORS_PATH))
    VECTORS_PATH.write_text(
        json.dumps(compute_vectors(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {VECTORS_PATH}")
