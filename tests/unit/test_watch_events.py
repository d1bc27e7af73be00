"""The watch events' wire (core/watch_events.py): each kind decodes into its dataclass, and what is
not one of them (a field missing or of another type, an unknown kind, text) decodes to None."""

from __future__ import annotations

import json
import math

import pytest

from gpuscout.core import watch_events
from gpuscout.core.watch_events import EpochEnded, FitAnnounced, FitBegan, LimitReached, Window


def test_a_window_decodes_with_its_types_an_int_where_a_float_is_due_made_float():
    line = json.dumps(
        {"event": "watch_window", "pid": 3, "fit": 0, "index": 1, "start_monotonic_s": 1, "end_monotonic_s": 2.5}
        | {"steps": 4, "samples": None, "loss": math.nan, "extra": "a field of a newer child"}
    ).encode()
    e = watch_events.decode(line)
    assert isinstance(e, Window) and e.fit == 0 and e.steps == 4 and e.samples is None
    assert isinstance(e.start_monotonic_s, float) and e.start_monotonic_s == 1.0 and math.isnan(e.loss)
    assert e.traced is False and e.input_wait_s is None  # defaults where the child sent nothing


def test_every_kind_makes_its_own_json_again():
    events = [
        FitBegan(pid=1, fit=2, began_monotonic_s=3.0, shuffle="batch", validation=True),
        FitAnnounced(pid=1, fit=2, backend="jax", sync_callbacks=["Lr"], sites={"fit": {"line": 3}, "input": None}),
        EpochEnded(pid=1, fit=2, epoch=1, start_monotonic_s=0.0, end_monotonic_s=1.0, steps=5, samples=160),
        LimitReached(pid=1, reason="10 training steps", steps=10),
    ]
    for e in events:
        assert watch_events.decode(json.dumps(e.to_json())) == e
    assert set(watch_events.KINDS) >= {"watch_fit", "watch_window", "watch_epoch", "sweep_report", "watch_exiting"}


@pytest.mark.parametrize(
    "obj",
    [
        {"event": "watch_limit", "pid": 1, "steps": 3},  # no reason
        {"event": "watch_limit", "pid": 1, "reason": None, "steps": 3},  # null where none may be
        {"event": "watch_limit", "pid": True, "reason": "r", "steps": 3},  # a bool is not a pid
        {"event": "watch_limit", "pid": 1, "reason": "r", "steps": 3.5},  # nor a float a step count
        {"event": "watch_fit", "pid": 1, "fit": 0, "sync_callbacks": ["a", 2]},  # a list of another type
        {"event": "watch_epoch_v9", "pid": 1},  # a kind this version does not know
        {"pid": 1},
        ["watch_limit"],
    ],
)
def test_what_is_not_an_event_of_its_kind_decodes_to_none(obj):
    assert watch_events.decode(obj) is None
    assert watch_events.decode(json.dumps(obj)) is None


def test_text_that_is_not_json_is_no_event():
    assert watch_events.decode(b"Epoch 1/3 \xff\xfe") is None
    assert watch_events.decode("") is None
