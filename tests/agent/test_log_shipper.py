"""The log shipper against a real HTTP peer playing the portal: a task's output goes through
``POST /api/v1/agent/logs/`` in big chunks, byte for byte, while the heartbeat reports only offsets and sizes.
Ref: #15"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.client import PortalClient, TaskKey
from agent.log_shipper import MIN_POST_BYTES, LogShipper
from agent.loop import Agent
from tests.agent.conftest import TOKEN, FakePortal


@pytest.fixture
def shipped(portal: FakePortal, make_agent: Callable[..., Agent]) -> Iterator[Callable[..., tuple[Agent, LogShipper]]]:
    """An agent with a log shipper of its own client; the test drives both (``step``, ``tick``) unless it starts
    the shipper's thread with ``threaded=True``."""
    stops: list[tuple[threading.Event, threading.Thread]] = []
    shippers: list[LogShipper] = []

    def make(*, threaded: bool = False, **options: object) -> tuple[Agent, LogShipper]:
        agent = make_agent(portal.url)
        shipper = LogShipper(PortalClient(portal.url, lambda: TOKEN, timeout=5.0), **options)  # type: ignore[arg-type]
        agent.log_shipper = shipper
        shippers.append(shipper)
        if threaded:
            stop = threading.Event()
            thread = threading.Thread(target=shipper.run, args=(stop,), daemon=True)
            thread.start()
            stops.append((stop, thread))
        return agent, shipper

    yield make
    for stop, thread in stops:
        stop.set()
        thread.join(timeout=5)
    for shipper in shippers:
        shipper.close()
        shipper.client.close()


def _drive(agent: Agent, shipper: LogShipper, done: Callable[[], object], *, rounds: int = 400) -> None:
    """Heartbeats, each followed by the shipper sending all it has due, until ``done()``."""
    for _ in range(rounds):
        if done():
            return
        agent.step()
        while shipper.tick() == 0:
            pass
        threading.Event().wait(0.02)
    raise AssertionError("condition not reached in time")


def _splits_a_character(data: bytes, at: int) -> bool:
    """Whether a whole, valid UTF-8 character starts before ``at`` and ends after it."""
    for start in range(max(0, at - 3), at):
        for length in range(at - start + 1, 5):
            try:
                if len(data[start : start + length].decode()) == 1:
                    return True
            except UnicodeDecodeError:
                continue
    return False


def _files_open_under(folder: Path) -> list[str]:
    """What this process holds open inside ``folder``: counted by target, not in total, because the HTTP clients'
    keep-alive sockets come and go on their own threads."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed between listing and reading
        if target.startswith(str(folder)):
            targets.append(target)
    return targets


def test_the_log_goes_beside_the_heartbeat_and_the_task_is_forgotten_once_all_of_it_is_in(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]]
) -> None:
    agent, shipper = shipped(linger=0.0)
    portal.add_task(30, "printf 'épοch 1\\n'; sleep 0.2; printf 'done ✓\\n'")
    expected = "épοch 1\ndone ✓\n".encode()
    _drive(agent, shipper, lambda: (30, 1) in portal.forgotten and not agent.runner.tasks)
    assert portal.logs["30:1:0"] == expected
    reports = portal.reports["30:1:0"]
    assert all(report["log"] == "" for report in reports)  # not one byte of log in a heartbeat
    assert reports[-1]["state"] == "exited" and reports[-1]["log_size"] == len(expected)
    assert all(report["log_offset"] == report["log_end"] <= report["log_size"] for report in reports)
    assert {wire for wire, _, _ in portal.log_posts} == {"30:1:0"} and shipper.shipped == len(expected)
    agent.step()  # the next beat hands the shipper the tasks left: it closes the forgotten one's descriptor
    assert shipper.held(TaskKey(30, 1, 0)) == 0


def test_a_large_log_arrives_whole_and_byte_exact_in_big_chunks(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]], tmp_path: Path
) -> None:
    """20 MiB with multi-byte characters across every chunk boundary, bytes that are not UTF-8 at some, and a
    character cut off at the very end: the portal gets exactly the file, and no chunk but the last ends inside a
    character (the portal would store it as "?")."""
    chunk = 2**20
    agent, shipper = shipped(threaded=True, post_bytes=chunk)
    line = "épοch ✓ 𝛼 loss 0.25\n".encode()  # characters of 1, 2, 3 and 4 bytes
    data = bytearray(line * (20 * chunk // len(line) + 1))
    for k in range(1, 20):
        data[k * chunk - 1 + k % 3] = 0xFF  # not UTF-8, at (or next to) where a chunk would end
    data += b"tail \xfe\x00 " + "𝛼".encode()[:2]  # and a character cut off at the very end
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    portal.add_task(31, ["cat", str(source)])
    step = 0
    while not ((31, 1) in portal.forgotten and not agent.runner.tasks):
        agent.step()
        threading.Event().wait(0.05)
        step += 1
        assert step < 600, f"{len(portal.logs.get('31:1:0', b''))} of {len(data)} bytes after {step} beats"
    assert portal.logs["31:1:0"] == bytes(data)
    posts = [(offset, size) for wire, offset, size in portal.log_posts if wire == "31:1:0"]
    assert max(size for _, size in posts) <= chunk and len(posts) >= len(data) // chunk
    assert any(size < chunk for _, size in posts[:-1])  # some chunk had to stop short of a cut character
    for offset, size in posts[:-1]:
        assert not _splits_a_character(bytes(data), offset + size), f"a chunk ended inside a character at {offset}"
    assert not any(report["log"] for report in portal.reports["31:1:0"])
    agent.step()  # the next beat hands the shipper the tasks left: it closes the forgotten one's descriptor
    assert _files_open_under(tmp_path) == []


def test_the_portal_holding_more_moves_the_shipper_on_without_a_duplicate(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]]
) -> None:
    """The answer to every POST is the offset the portal holds: a shipper that is behind skips ahead."""
    agent, shipper = shipped(linger=0.0)
    portal.logs["32:1:0"] = b"first\n"  # as if an earlier POST's answer had been lost
    portal.add_task(32, "echo first; echo second")
    _drive(agent, shipper, lambda: (32, 1) in portal.forgotten)
    assert portal.logs["32:1:0"] == b"first\nsecond\n"
    assert [(offset, size) for _, offset, size in portal.log_posts] == [(0, 13), (6, 7)]


def test_a_portal_with_a_lower_body_limit_gets_smaller_chunks(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]], tmp_path: Path
) -> None:
    portal.log_post_limit = 100_000
    agent, shipper = shipped(post_bytes=2**20, linger=0.0)
    source = tmp_path / "log.txt"
    source.write_bytes(b"0123456789abcdef\n" * 40_000)  # 680,000 bytes
    portal.add_task(33, ["cat", str(source)])
    _drive(agent, shipper, lambda: (33, 1) in portal.forgotten)
    assert portal.logs["33:1:0"] == source.read_bytes()
    assert shipper.post_bytes == MIN_POST_BYTES  # halved past every 413 until the portal took it


def test_a_portal_without_the_endpoint_gets_the_log_in_heartbeats(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]]
) -> None:
    """An older portal: the route is a 404 without a code. The shipper stands down and the heartbeat carries the
    log as it used to."""
    portal.log_endpoint = False
    agent, shipper = shipped(linger=0.0)
    portal.add_task(34, "echo from an older portal")
    _drive(agent, shipper, lambda: (34, 1) in portal.forgotten)
    assert portal.log(34) == "from an older portal\n" and not shipper.available
    assert any(report["log"] for report in portal.reports["34:1:0"])


def test_a_task_the_portal_does_not_know_is_set_aside_and_the_others_still_ship(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]]
) -> None:
    portal.auto_forget = False
    portal.refuse_logs_of.add("35:1:0")
    agent, shipper = shipped(linger=0.0)
    portal.add_task(35, "echo not yours")
    portal.add_task(36, "echo mine")
    _drive(agent, shipper, lambda: portal.logs.get("36:1:0") == b"mine\n")
    for _ in range(5):
        agent.step()
        shipper.tick()
    assert portal.logs.get("35:1:0", b"") == b"" and [wire for wire, _, _ in portal.log_posts] == ["36:1:0"]


def test_a_portal_that_is_down_gets_the_log_when_it_is_back(
    portal: FakePortal, shipped: Callable[..., tuple[Agent, LogShipper]]
) -> None:
    agent, shipper = shipped(linger=0.0)
    portal.add_task(37, "echo written while the portal was away")
    _drive(agent, shipper, lambda: agent.runner.tasks and not next(iter(agent.runner.tasks.values())).alive)
    portal.down()
    shipper.sync(agent.runner.tasks)
    assert shipper.tick() > 0  # backing off
    portal.serve()
    _drive(agent, shipper, lambda: (37, 1) in portal.forgotten)
    assert portal.log(37) == "written while the portal was away\n"
