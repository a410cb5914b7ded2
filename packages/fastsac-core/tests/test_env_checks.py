"""What a batched env returns is checked, and what its own code raises is said: one line naming the env."""

from __future__ import annotations

import inspect
import json
import math
import re
import traceback
from dataclasses import replace

import numpy as np
import pytest

from fastsac_core import (
    EnvCall,
    EnvCallError,
    EnvDims,
    EnvOutputError,
    StepResult,
    check_reset,
    check_step,
    env_fault,
    env_label,
    env_raised,
)

N, OBS, ACT = 3, 4, 2


class _Env:
    """Only what the checks read of a BatchedEnv: its count, dims and (optionally) its gymnasium id."""

    num_envs = N
    dims = EnvDims(obs_dim=OBS, critic_obs_dim=OBS, act_dim=ACT, action_low=(-1.0,) * ACT,
                   action_high=(1.0,) * ACT, critic_obs_is_obs=True)  # fmt: skip

    def __init__(self, env_id: str | None = "Point-v0") -> None:
        if env_id is not None:
            self.env_id = env_id


def _result(**changes: object) -> StepResult:
    obs = np.zeros((N, OBS), np.float32)
    good = StepResult(
        obs=obs, critic_obs=obs, rewards=np.ones(N, np.float32), terminated=np.zeros(N, np.bool_),
        truncated=np.zeros(N, np.bool_), final_obs=np.zeros((N, OBS), np.float32),
        episode_returns=np.zeros(0, np.float32), episode_lengths=np.zeros(0, np.int64),
    )  # fmt: skip
    return replace(good, **changes)  # type: ignore[arg-type]


def test_a_good_step_and_reset_pass_and_the_label_is_the_id_or_the_type() -> None:
    """Right shapes, bool or 0/1 integer flags, finite values pass; the label is env_id, else the type."""
    env = _Env()
    check_reset(env, np.zeros((N, OBS), np.float32), np.zeros((N, OBS), np.float32))  # type: ignore[arg-type]
    check_step(env, _result())  # type: ignore[arg-type]
    check_step(env, _result(terminated=np.array([0, 1, 0], np.uint8)))  # type: ignore[arg-type]
    assert env_label(env) == "Point-v0" and env_label(_Env(None)) == "_Env"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"rewards": np.array([1.0, np.nan, 1.0], np.float32)},
            "step() returned rewards holding nan (env 1 of 3)",
        ),
        ({"obs": np.full((N, OBS), np.inf, np.float32)}, "step() returned observations holding inf (env 0"),
        ({"rewards": np.ones((N, 1), np.float32)}, "returned rewards of shape (3, 1); it must be (3,)"),
        (
            {"obs": np.zeros((N, OBS + 1), np.float32)},
            "returned observations of shape (3, 5); it must be (3, 4)",
        ),
        ({"terminated": np.zeros(N, np.float32)}, "returned terminated of dtype float32; return booleans"),
        (
            {"truncated": np.array([0, 2, 0], np.int64)},
            "returned truncated holding values other than 0 and 1",
        ),
        ({"truncated": [False] * N}, "returned truncated as a list; return a numpy array of shape (3,)"),
        (
            {
                "terminated": np.array([False, True, False]),
                "final_obs": np.full((N, OBS), np.nan, np.float32),
            },
            "final_obs of the episodes that ended holding nan",
        ),
    ],
    ids=[
        "nan reward",
        "inf obs",
        "reward shape",
        "obs shape",
        "float flags",
        "int 2",
        "list flags",
        "nan final obs",
    ],
)
def test_a_step_that_breaks_the_protocol_is_one_line_naming_the_env(
    changes: dict[str, object], message: str
) -> None:
    """A NaN, an inf, a wrong shape, float or list flags, an ended episode's NaN final obs: one line."""
    with pytest.raises(EnvOutputError) as caught:
        check_step(_Env(), _result(**changes))  # type: ignore[arg-type]
    line = str(caught.value)
    assert line.startswith("Point-v0's ") and message in line and "\n" not in line, line


def test_only_the_final_obs_of_envs_that_ended_are_looked_at_and_the_row_is_named() -> None:
    """Stale final_obs rows (episodes going on) may hold anything; an ended env's NaN names its own row."""
    check_step(_Env(), _result(final_obs=np.full((N, OBS), np.nan, np.float32)))  # type: ignore[arg-type]
    final = np.zeros((N, OBS), np.float32)
    final[0] = np.nan  # env 0 goes on: stale
    final[2, 1] = np.nan  # env 2 ended
    flags = np.array([0, 1, 1], np.uint8)  # 0/1 integers: envs 1 and 2 ended
    with pytest.raises(
        EnvOutputError, match=r"final_obs of the episodes that ended holding nan \(env 2 of 3\)"
    ):
        check_step(_Env(), _result(terminated=flags, final_obs=final))  # type: ignore[arg-type]


def test_a_reset_with_a_nan_or_a_wrong_shape_is_refused() -> None:
    """Reset's observations are checked as step's are."""
    env = _Env()
    bad = np.zeros((N, OBS), np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(EnvOutputError, match=r"reset\(\) returned observations holding nan \(env 2 of 3\)"):
        check_reset(env, bad, bad)  # type: ignore[arg-type]
    with pytest.raises(EnvOutputError, match=r"reset\(\) returned critic observations of shape \(3,\)"):
        check_reset(env, np.zeros((N, OBS), np.float32), np.zeros(N, np.float32))  # type: ignore[arg-type]


def _raise(error: Exception) -> None:
    raise error


def test_an_env_exception_is_one_line_naming_the_env_the_call_the_error_and_its_place() -> None:
    """env_raised: label, call, type, message, file:line, function; a long message is cut, not the place."""
    try:
        _raise(ValueError("bad action\nsecond line"))
    except ValueError as error:
        line = env_raised(_Env(), "step", error)  # type: ignore[arg-type]
    assert re.fullmatch(
        r"Point-v0's step\(\) raised ValueError: bad action \(raised at test_env_checks\.py:\d+ in _raise\)",
        line,
    ), line
    try:
        _raise(RuntimeError("x" * 500))
    except RuntimeError as error:
        fault = env_fault(error)
    assert len(fault) < 220 and "x…" in fault and fault.endswith("in _raise)"), fault
    assert env_fault(KeyError()) == "KeyError", "no message, never raised: the type alone"


def _reshape_wrongly() -> None:
    np.reshape(np.zeros(3), (2, 2))  # numpy raises, several of its own frames below this line


def test_the_place_is_the_users_line_not_the_library_frame_that_raised() -> None:
    """The innermost frame outside the library: numpy's error names the user's line, not its _wrapfunc."""
    with pytest.raises(EnvCallError) as caught, EnvCall(_Env(), "step"):  # type: ignore[arg-type]
        _reshape_wrongly()
    innermost = traceback.extract_tb(caught.value.__cause__.__traceback__)[-1]  # type: ignore[union-attr]
    assert "numpy" in innermost.filename, "the exception was raised inside numpy"
    line = inspect.getsourcelines(_reshape_wrongly)[1] + 1
    said = str(caught.value)
    assert said.endswith(f"(raised at test_env_checks.py:{line} in _reshape_wrongly)"), said
    try:  # only library code below the catcher (an installed env): the innermost frame, not the caller
        json.loads("{")
    except ValueError as error:
        fault = env_fault(error)
    assert re.search(r"\(raised at decoder\.py:\d+ in raw_decode\)$", fault), fault
    try:  # raised in C code called by the catcher itself (a native env): no place to name
        math.sqrt(-1.0)
    except ValueError as error:
        assert env_fault(error) == "ValueError: math domain error"


def test_env_call_turns_the_envs_own_exception_into_one_line_and_lets_ours_pass() -> None:
    """EnvCall raises EnvCallError from the env's exception; EnvOutputError and KeyboardInterrupt pass."""
    call = EnvCall(_Env(None), "reset")  # type: ignore[arg-type]
    with pytest.raises(EnvCallError) as caught, call:
        _raise(OSError("no licence"))
    assert str(caught.value).startswith(
        "_Env's reset() raised OSError: no licence (raised at test_env_checks.py:"
    )
    assert isinstance(caught.value.__cause__, OSError)
    for ours in (EnvOutputError("Point-v0's step() returned ..."), KeyboardInterrupt()):
        with pytest.raises(type(ours)), call:
            raise ours
    with call:  # and nothing when nothing is raised (the same guard serves every call)
        pass
