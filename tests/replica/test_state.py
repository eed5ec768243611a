"""Tests of the replica state file's content (laminar.replica.state)."""

from __future__ import annotations

import msgpack
import pytest

from laminar.replica.state import (
    BOOTSTRAP_OFFSET,
    PersistedState,
    decode_state,
    encode_state,
    founding_state,
)
from laminar.replica.types import GroupConfig, NodeId

A, B, C = NodeId("a"), NodeId("b"), NodeId("c")


def test_round_trip() -> None:
    configs = [(BOOTSTRAP_OFFSET, GroupConfig((A, B, C))), (40, GroupConfig((A, B), (C,)))]
    saved = encode_state(7, B, configs, [[2, 9], [5, 19]], healing_since=33)
    assert decode_state(saved) == PersistedState(7, B, configs, [[2, 9], [5, 19]], 33)
    assert decode_state(encode_state(0, None, [], [])) == PersistedState(0, None, [], [])


def test_founding_state_is_term_one_voted_for_the_first_voter() -> None:
    state = decode_state(founding_state(GroupConfig((B, A))))
    assert (state.term, state.vote) == (1, B)
    assert state.configs == [(BOOTSTRAP_OFFSET, GroupConfig((B, A)))]


def test_impossible_states_are_refused_on_both_sides() -> None:
    out_of_order = [(40, GroupConfig((A,))), (40, GroupConfig((B,)))]
    with pytest.raises(AssertionError, match="not increasing"):
        encode_state(3, None, out_of_order, [])  # before the write: a bug
    with pytest.raises(AssertionError, match="negative term"):
        encode_state(-1, None, [], [])
    bad = msgpack.packb(
        {"v": 1, "term": 3, "vote": None, "configs": [[40, ["a"], []], [12, ["b"], []]]}
    )
    with pytest.raises(ValueError, match="not increasing"):
        decode_state(bad)  # after the read: damage
    with pytest.raises(ValueError, match="version 2"):
        decode_state(msgpack.packb({"v": 2}))
