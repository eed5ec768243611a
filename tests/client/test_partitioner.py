"""Which partition a record goes to: `key_partition` and `StickyPartitioner`."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import xxhash
from laminar_client.partitioner import StickyPartitioner, key_partition

from laminar.errors import InvalidInputError

KEYS = [b"", b"a", b"order-17", bytes(range(256)), "clé".encode(), b"\x00" * 1000]


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 12, 64, 1000])
def test_key_partition_is_xxh3_64_modulo_the_partition_count(partitions: int) -> None:
    rng = random.Random(partitions)
    keys = KEYS + [rng.randbytes(rng.randrange(1, 300)) for _ in range(200)]
    for key in keys:
        expected = xxhash.xxh3_64(key, seed=0).intdigest() % partitions
        assert key_partition(key, partitions) == expected
        assert 0 <= key_partition(key, partitions) < partitions


def test_key_partition_is_stable() -> None:
    # XXH3_64bits of the empty input (the reference implementation's test vector):
    # other languages computing the documented function agree with these.
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2
    assert key_partition(b"", 1 << 62) == 0x2D06800538D394C2 % (1 << 62)
    assert key_partition(b"", 10) == 0x2D06800538D394C2 % 10
    for key in KEYS:
        assert len({key_partition(key, 12) for _ in range(3)}) == 1
        assert key_partition(bytes(key), 12) == key_partition(key, 12)


@pytest.mark.parametrize("partitions", [0, -1])
def test_key_partition_refuses_fewer_than_one_partition(partitions: int) -> None:
    with pytest.raises(InvalidInputError):
        key_partition(b"k", partitions)


def test_sticky_keeps_the_partition_until_switch_bytes_then_moves() -> None:
    sticky = StickyPartitioner(switch_bytes=100, rng=random.Random(3))
    first = [sticky.partition("t", 8, 10) for _ in range(10)]  # 100 bytes: not yet past
    assert len(set(first)) == 1
    moved = sticky.partition("t", 8, 10)
    assert moved != first[0]
    assert {sticky.partition("t", 8, 10) for _ in range(9)} == {moved}  # sticks again
    # One large record counts in full: the next record moves.
    big = sticky.partition("t", 8, 1000)
    assert big != moved
    assert sticky.partition("t", 8, 1) != big


def test_every_switch_goes_to_another_partition() -> None:
    sticky = StickyPartitioner(switch_bytes=1, rng=random.Random(11))
    choices = [sticky.partition("t", 5, 1) for _ in range(2000)]
    assert all(a != b for a, b in itertools.pairwise(choices))
    assert set(choices) == set(range(5))


def test_keyless_records_spread_within_ten_percent_of_even() -> None:
    partitions, switches = 12, 10_000
    sticky = StickyPartitioner(switch_bytes=1000, rng=random.Random(2024))
    counts: Counter[int] = Counter()
    for _ in range(switches + 1):
        # 4 records of 250 bytes per stay: a switch every 4 records.
        stay = [sticky.partition("t", partitions, 250) for _ in range(4)]
        assert len(set(stay)) == 1
        counts[stay[0]] += 1
    even = (switches + 1) / partitions
    assert set(counts) == set(range(partitions))
    for partition, count in counts.items():
        assert abs(count - even) <= 0.1 * even, (partition, count, even)


def test_a_seeded_rng_reproduces_the_choices() -> None:
    def run(seed: int) -> list[int]:
        sticky = StickyPartitioner(switch_bytes=50, rng=random.Random(seed))
        return [sticky.partition(f"t{i % 3}", 9, 20) for i in range(500)]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_topics_stick_independently() -> None:
    sticky = StickyPartitioner(switch_bytes=100, rng=random.Random(1))
    a = sticky.partition("a", 50, 60)
    b = sticky.partition("b", 50, 60)
    assert sticky.partition("a", 50, 40) == a  # b's bytes do not count for a
    assert sticky.partition("b", 50, 40) == b
    assert sticky.partition("a", 50, 1) != a
    assert sticky.partition("b", 50, 1) != b


def test_a_partition_count_change_restarts_the_topic() -> None:
    sticky = StickyPartitioner(switch_bytes=100, rng=random.Random(9))
    for _ in range(9):
        sticky.partition("t", 2, 10)  # 90 of 100 bytes on one of 2 partitions
    grown = sticky.partition("t", 64, 10)
    assert 0 <= grown < 64
    # A fresh start: the byte count restarted, so it stays for 100 bytes more.
    assert {sticky.partition("t", 64, 10) for _ in range(9)} == {grown}
    assert sticky.partition("t", 64, 10) != grown
    for _ in range(20):  # shrinking restarts too and stays in range
        assert 0 <= sticky.partition("t", 3, 50) < 3


def test_a_single_partition_is_always_zero() -> None:
    sticky = StickyPartitioner(switch_bytes=1, rng=random.Random(0))
    assert {sticky.partition("t", 1, 5) for _ in range(50)} == {0}


def test_switch_bytes_below_one_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        StickyPartitioner(switch_bytes=0)
