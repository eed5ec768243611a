"""The one owner of the idempotent producer's numbers (laminar_client.sequencing),
as the three writers use it."""

from __future__ import annotations

import random

import pytest
from laminar_client import _sender, idempotent, sequencing
from laminar_client.sequencing import (
    PRODUCER_ID_MAX,
    SEQUENCE_LIMIT,
    Lineage,
    Verdict,
    random_producer_id,
    records_held,
    verdict,
)
from laminar_spark import producing

from laminar.errors import (
    InvalidInputError,
    NotLeaderError,
    OutOfOrderSequenceError,
    StorageError,
    StorageFullError,
    UnknownTopicOrPartitionError,
)


def test_a_lineage_numbers_batches_from_zero_until_the_int32_limit() -> None:
    lineage = Lineage(7)
    assert [lineage.take(3), lineage.take(1), lineage.take(5)] == [0, 3, 4]
    assert lineage.next_sequence == 9
    near = Lineage(7, SEQUENCE_LIMIT - 10)
    assert near.fits(9) and not near.fits(10)


def test_producer_ids_are_non_negative_int64() -> None:
    rng = random.Random(5)
    ids = [random_producer_id(rng) for _ in range(1000)]
    assert all(0 <= i < PRODUCER_ID_MAX for i in ids) and len(set(ids)) == 1000


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OutOfOrderSequenceError(1, 9, 4), Verdict.OUT_OF_ORDER),
        (NotLeaderError("n1", None), Verdict.RETRY),
        (StorageError("fenced"), Verdict.RETRY),
        (StorageFullError("full"), Verdict.FATAL),
        (InvalidInputError("bad"), Verdict.FATAL),
        (UnknownTopicOrPartitionError("t"), Verdict.FATAL),
        (OSError("reset"), Verdict.RETRY),
    ],
)
def test_what_a_failed_attempt_means(error: BaseException, expected: Verdict) -> None:
    assert verdict(error) is expected


def test_an_out_of_order_answer_says_how_many_records_the_broker_holds() -> None:
    assert records_held(expected_sequence=25, base_sequence=20) == 5
    assert records_held(expected_sequence=20, base_sequence=20) == 0
    assert records_held(expected_sequence=19, base_sequence=20) is None  # lost


def test_every_writer_takes_its_numbers_from_the_one_module() -> None:
    assert _sender.SEQUENCE_LIMIT is sequencing.SEQUENCE_LIMIT
    assert _sender.verdict is sequencing.verdict and _sender.Verdict is sequencing.Verdict
    assert _sender.MAX_IN_FLIGHT_LIMIT == sequencing.PRODUCER_WINDOW_BATCHES
    assert producing.SEQUENCE_LIMIT is sequencing.SEQUENCE_LIMIT
    assert idempotent.Lineage is producing.Lineage is sequencing.Lineage
