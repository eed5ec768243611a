"""Tests of producer admission within one produce request (ProducerTable.admit)."""

from __future__ import annotations

from laminar.records import BatchHeader, encode_batch, parse_header
from laminar.replica.producers import (
    NotConsecutive,
    ProducerTable,
    SequenceCheck,
    Verdict,
)


def _header(producer_id: int, base_sequence: int, count: int = 1) -> BatchHeader:
    values = [b"v"] * count
    return parse_header(encode_batch(values, producer_id=producer_id, base_sequence=base_sequence))


def _admit_all(table: ProducerTable, headers: list[BatchHeader]) -> list[object]:
    earlier: list[tuple[BatchHeader, SequenceCheck]] = []
    verdicts: list[object] = []
    for header in headers:
        check = table.admit(header, earlier)
        verdicts.append(check if isinstance(check, NotConsecutive) else check.verdict)
        if isinstance(check, SequenceCheck):
            earlier.append((header, check))
    return verdicts


def test_batches_following_a_new_batch_in_the_request_are_new() -> None:
    table = ProducerTable(window=5, producers_max=10)
    table.record(7, 0, 2, base_offset=0)
    # 2 is new; 4 follows it in the request (the table alone would call it a gap).
    assert _admit_all(table, [_header(7, 2, 2), _header(7, 4)]) == [Verdict.NEW, Verdict.NEW]


def test_a_request_must_not_skip_within_a_producer() -> None:
    table = ProducerTable(window=5, producers_max=10)
    verdicts = _admit_all(table, [_header(7, 0, 3), _header(8, 0), _header(7, 5)])
    assert verdicts[:2] == [Verdict.NEW, Verdict.NEW]
    refusal = verdicts[2]
    assert refusal == NotConsecutive(0, 3, 5)
    assert isinstance(refusal, NotConsecutive)
    assert refusal.detail.endswith("sequences: 0+3 is followed by 5")


def test_duplicates_and_gaps_against_the_table() -> None:
    table = ProducerTable(window=5, producers_max=10)
    table.record(7, 0, 2, base_offset=40)
    table.record(7, 2, 1, base_offset=42)
    duplicate = table.admit(_header(7, 0, 2), [])
    assert duplicate == SequenceCheck(Verdict.DUPLICATE, base_offset=40)
    # A retried request: both duplicates (the first is not NEW, so the table decides).
    assert _admit_all(table, [_header(7, 0, 2), _header(7, 2)]) == [
        Verdict.DUPLICATE,
        Verdict.DUPLICATE,
    ]
    gap = table.admit(_header(7, 9), [])
    assert gap == SequenceCheck(Verdict.OUT_OF_ORDER, expected_sequence=3)
