"""Tests of the next single configuration change (laminar.replica.confchange)."""

from __future__ import annotations

import pytest

from laminar.records import DEFAULT_LIMITS, encode_control_batch, parse_header
from laminar.replica.confchange import (
    CONTROL_NOOP,
    TransferTo,
    config_in,
    encode_config,
    next_change,
)
from laminar.replica.types import GroupConfig, NodeId

A, B, C, D, E = (NodeId(n) for n in "abcde")


def _next(
    config: GroupConfig,
    target: tuple[NodeId, ...] | None,
    *,
    caught_up: tuple[NodeId, ...] = (),
    healing: tuple[NodeId, ...] = (),
) -> GroupConfig | TransferTo | None:
    return next_change(
        config,
        target,
        leader=A,
        caught_up=lambda node: node in caught_up,
        healing=lambda node: node in healing,
    )


@pytest.mark.parametrize(
    ("config", "target", "caught_up", "expected"),
    [
        # Nothing to do.
        (GroupConfig((A, B, C)), (A, B, C), (B, C), None),
        (GroupConfig((A, B, C)), (C, B, A), (), None),  # order is the leader preference
        # Replace C by D: add D as a learner, promote it once caught up, remove C.
        (GroupConfig((A, B, C)), (A, B, D), (), GroupConfig((A, B, C), (D,))),
        (GroupConfig((A, B, C), (D,)), (A, B, D), (B, C), None),  # D catches up
        (GroupConfig((A, B, C), (D,)), (A, B, D), (D,), GroupConfig((A, B, C, D))),
        (GroupConfig((A, B, C, D)), (A, B, D), (), GroupConfig((A, B, D))),
        # Two missing nodes: one learner at a time, in target order.
        (GroupConfig((A,)), (A, E, D), (), GroupConfig((A,), (E,))),
        (GroupConfig((A,), (E,)), (A, E, D), (), GroupConfig((A,), (E, D))),
        # A learner the target leaves out goes before any voter.
        (GroupConfig((A, B, C), (E,)), (A, B), (), GroupConfig((A, B, C))),
        (GroupConfig((A, B, C)), (A, B), (), GroupConfig((A, B))),
        # The leader leaves last: another leaving voter first...
        (GroupConfig((A, B, C)), (B,), (B,), GroupConfig((A, B))),
        # ...then by handing leadership to a caught-up voter of the target.
        (GroupConfig((A, B)), (B,), (B,), TransferTo(B)),
        (GroupConfig((A, B)), (B,), (), None),  # nobody caught up to hand it to
        # Replacing a sole voter (not the leader: A leads while being removed) starts
        # with its replacement as a learner.
        (GroupConfig((B,)), (C,), (), GroupConfig((B,), (C,))),
    ],
)
def test_towards_target(
    config: GroupConfig,
    target: tuple[NodeId, ...],
    caught_up: tuple[NodeId, ...],
    expected: GroupConfig | TransferTo | None,
) -> None:
    assert _next(config, target, caught_up=caught_up) == expected


def test_a_sole_voter_is_never_removed() -> None:
    assert _next(GroupConfig((B,)), ()) is None
    assert _next(GroupConfig((B,), (C,)), (C,)) is None  # its replacement catches up


def test_healing_voter_is_demoted_first_even_without_target() -> None:
    config = GroupConfig((A, B, C))
    demoted = GroupConfig((A, C), (B,))
    assert _next(config, None, healing=(B,)) == demoted
    assert _next(config, (A, B, D), healing=(B,)) == demoted  # before adding D
    assert _next(config, None, healing=(A,)) is None  # the leader is never asked about
    # One at a time: C waits until B is out.
    assert _next(config, None, healing=(B, C)) == demoted


def test_without_target_nothing_but_demotion() -> None:
    assert _next(GroupConfig((A, B), (C,)), None, caught_up=(C,)) is None


def test_config_batch_round_trip() -> None:
    config = GroupConfig((A, B), (C,))
    batch = encode_config(config, 1_234)
    header = parse_header(batch)
    assert header.is_control
    assert config_in(header, batch, DEFAULT_LIMITS) == config
    noop = encode_control_batch(CONTROL_NOOP, b"", 1_234)
    assert config_in(parse_header(noop), noop, DEFAULT_LIMITS) is None
