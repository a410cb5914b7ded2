"""The kernel cpulist format: parsing, formatting, round trips and every malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numa_bind import CpuListError, format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("0", (0,)),
        ("", ()),
        ("\n", ()),
        (" 5 \n", (5,)),
        ("3,1,1,2-2", (1, 2, 3)),
        ("0-1023", tuple(range(1024))),
    ],
)
def test_parse_examples(text: str, cpus: tuple[int, ...]) -> None:
    """Kernel-style lists parse to sorted, de-duplicated ids; empty means no CPUs."""
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ((0, 1, 2, 3, 8, 10, 11), "0-3,8,10-11"),
        ((), ""),
        ((7,), "7"),
        ((5, 4, 4, 1), "1,4-5"),
        ((0, 2, 4), "0,2,4"),
    ],
)
def test_format_examples(cpus: tuple[int, ...], text: str) -> None:
    """Runs of two or more consecutive ids become ranges; order and duplicates do not matter."""
    assert format_cpulist(cpus) == text


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=300))
def test_round_trip(cpus: set[int]) -> None:
    """parse(format(s)) returns s sorted, and formatting is canonical (format(parse(t)) == t)."""
    text = format_cpulist(cpus)
    assert parse_cpulist(text) == tuple(sorted(cpus))
    assert format_cpulist(parse_cpulist(text)) == text


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("1-", "1-"),
        ("-3", "-3"),
        ("3-1", "3-1"),
        ("a", "a"),
        ("1,,2", ""),
        ("1 2", "1 2"),
        ("0x3", "0x3"),
        ("1-2-3", "1-2-3"),
        ("0,", ""),
    ],
)
def test_malformed_lists_name_the_token(text: str, token: str) -> None:
    """Each malformed string raises CpuListError (a ValueError) naming the string and the bad token."""
    with pytest.raises(CpuListError) as caught:
        parse_cpulist(text)
    assert isinstance(caught.value, ValueError)
    assert caught.value.text == text
    assert caught.value.token == token
    assert repr(text) in str(caught.value)
    assert repr(token) in str(caught.value)


def test_format_rejects_negative_ids() -> None:
    """A negative id cannot be formatted: CpuListError names it."""
    with pytest.raises(CpuListError, match="-1"):
        format_cpulist([3, -1])


def test_parse_refuses_what_is_not_a_string() -> None:
    """parse_cpulist(None) raises TypeError naming the value and the format, not an AttributeError."""
    with pytest.raises(TypeError, match="takes a string such as '0-3,8', got None"):
        parse_cpulist(None)  # type: ignore[arg-type]
