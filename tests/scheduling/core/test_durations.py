"""The one duration grammar the submit form and ``corral submit --time-limit`` share, and how limits read back."""

from __future__ import annotations

import pytest

from scheduling.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7200", 7200),
        (" 45 ", 45),
        ("2h", 7200),
        ("90m", 5400),
        ("1d", 86_400),
        ("1D 12H", 129_600),
        ("1h30m", 5400),
        ("1h 30m 15s", 5415),
        ("1.5h", 5400),
        ("30s", 30),
        ("0", 0),  # parses; the service refuses a limit of 0
    ],
)
def test_parse(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "   ", "abc", "2x", "h", "-5", "1h30", "30m 1h", "1h 1h", "2 hours", "1e3"])
def test_parse_refuses_with_a_readable_sentence(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration|largest first"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(7200, "2h"), (5400, "1h 30m"), (90_061, "1d 1h 1m 1s"), (59.6, "1m"), (0, "0s"), (-3, "0s"), (2_592_000, "30d")],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_what_is_formatted_parses_back() -> None:
    for seconds in (1, 59, 61, 3599, 3600, 86_399, 86_401, 2_592_000):
        assert parse_duration(format_duration(seconds)) == seconds
