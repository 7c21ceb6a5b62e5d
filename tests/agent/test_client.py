"""Parsing of the portal's replies, and how HTTP answers map to the agent's three kinds of failure."""

from __future__ import annotations

import signal

import pytest

from agent.client import (
    PortalClient,
    PortalRefused,
    PortalUnavailable,
    RegisterAgain,
    TaskKey,
    TaskReport,
    TaskState,
    parse_heartbeat_reply,
)


def test_a_full_reply_parses_into_typed_orders() -> None:
    reply = parse_heartbeat_reply(
        {
            "start": [
                {"job": 43, "attempt": 1, "rank": 2, "command": "python train.py", "gpus": [0, 1], "env": {"A": 1}},
                {"job": 44, "attempt": 1, "command": ["python", "x.py"]},
            ],
            "kill": [{"job": 42, "attempt": 1, "grace_seconds": 10}, {"job": 40, "attempt": 3}],
            "forget": [{"job": 41, "attempt": 2}],
            "signal": [{"job": 42, "attempt": 1, "signal": "SIGUSR1"}, {"job": 42, "attempt": 1, "signal": "usr2"}],
            "log_offsets": {"42:1:0": 12},
            "heartbeat_interval": 2.0,
        }
    )
    first, second = reply.start
    assert first.key == TaskKey(43, 1, 2) and first.gpus == (0, 1) and first.env == {"A": "1"}
    assert second.key == TaskKey(44, 1, 0) and second.command == ("python", "x.py") and second.gpus == ()
    assert [(k.job, k.grace_seconds) for k in reply.kill] == [(42, 10.0), (40, None)]
    assert [(f.job, f.attempt) for f in reply.forget] == [(41, 2)]
    assert [o.signal for o in reply.signal] == [signal.SIGUSR1, signal.SIGUSR2]
    assert reply.log_offsets == {TaskKey(42, 1, 0): 12}
    assert reply.heartbeat_interval == 2.0


def test_malformed_orders_are_skipped_and_the_rest_applies() -> None:
    reply = parse_heartbeat_reply(
        {
            "start": [{"job": "x", "attempt": 1, "command": "true"}, {"job": 1, "attempt": 1, "command": ""}, 7],
            "kill": [{"job": 5}, {"job": 6, "attempt": 1}],
            "forget": "nope",
            "signal": [{"job": 1, "attempt": 1, "signal": "SIGNOPE"}],
            "log_offsets": {"bad": 3, "1:1:0": True, "2:1:0": 5},
            "heartbeat_interval": -1,
        }
    )
    assert reply.start == ()
    assert [k.job for k in reply.kill] == [6]
    assert reply.forget == () and reply.signal == ()
    assert reply.log_offsets == {TaskKey(2, 1, 0): 5}
    assert reply.heartbeat_interval is None


def test_reports_serialise_to_the_protocol_shape() -> None:
    report = TaskReport(TaskKey(42, 1, 0), TaskState.EXITED, 1234, -9, 12, "tail\n", 17)
    assert report.to_json() == {
        "job": 42,
        "attempt": 1,
        "rank": 0,
        "state": "exited",
        "pid": 1234,
        "exit_code": -9,
        "log_offset": 12,
        "log": "tail\n",
        "log_end": 17,
        "log_size": 17,
    }


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (409, {"detail": "register again"}, RegisterAgain),
        (401, {"detail": "register again"}, RegisterAgain),
        (401, {"detail": "Invalid node token."}, PortalRefused),
        (503, {}, PortalUnavailable),
        (308, {}, PortalRefused),
    ],
)
def test_http_answers_map_to_failure_kinds(portal, status, body, error) -> None:
    portal.handle = lambda path, auth, request: (status, body)
    client = PortalClient(portal.url, lambda: portal.token, timeout=2.0)
    try:
        with pytest.raises(error):
            client.heartbeat([])
    finally:
        client.close()


def test_an_unreachable_portal_is_unavailable(portal) -> None:
    portal.down()
    client = PortalClient(portal.url, lambda: portal.token, timeout=2.0)
    try:
        with pytest.raises(PortalUnavailable):
            client.heartbeat([])
    finally:
        client.close()
