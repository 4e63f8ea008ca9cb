"""Numeric settings have a range; an absurd value fails at start-up and names the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from mango.config import (
    DEFAULT_MAX_OUTPUT_BYTES,
    MAX_OUTPUT_BYTES_ENV,
    MAX_OUTPUT_BYTES_LIMIT,
    Settings,
    max_output_bytes,
)
from mango.domain import ConfigurationError


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e300", "abc", "1e9"])
def test_exec_timeout_out_of_range_names_the_variable(tmp_path: Path, value: str) -> None:
    """NaN, infinities, zero, negatives, more than a week and text are refused."""
    env = {"MANGO_STATE_DIR": str(tmp_path), "MANGO_EXEC_TIMEOUT": value}
    with pytest.raises(ConfigurationError, match="MANGO_EXEC_TIMEOUT must be a number from"):
        Settings.from_env(env)


def test_exec_timeout_in_range(tmp_path: Path) -> None:
    """A sensible timeout is read as seconds; unset means no bound."""
    base = {"MANGO_STATE_DIR": str(tmp_path)}
    assert Settings.from_env({**base, "MANGO_EXEC_TIMEOUT": "2.5"}).exec_timeout == 2.5
    assert Settings.from_env(base).exec_timeout is None


@pytest.mark.parametrize("value", ["0", "-5", "1.5", str(MAX_OUTPUT_BYTES_LIMIT + 1), "nan", "x"])
def test_max_output_bytes_out_of_range(value: str) -> None:
    """The output cap is a whole number of bytes from 1 to 256 MiB."""
    with pytest.raises(ConfigurationError, match=f"{MAX_OUTPUT_BYTES_ENV} must be a whole number"):
        max_output_bytes({MAX_OUTPUT_BYTES_ENV: value})


def test_max_output_bytes_in_range() -> None:
    """Unset gives the default; the bounds themselves are accepted."""
    assert max_output_bytes({}) == DEFAULT_MAX_OUTPUT_BYTES
    assert max_output_bytes({MAX_OUTPUT_BYTES_ENV: "1"}) == 1
    limit = str(MAX_OUTPUT_BYTES_LIMIT)
    assert max_output_bytes({MAX_OUTPUT_BYTES_ENV: limit}) == MAX_OUTPUT_BYTES_LIMIT


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "604801", "soon"])
def test_outputs_quiet_period_out_of_range(tmp_path: Path, value: str) -> None:
    """The outputs' quiet period is 0 to a week of seconds; anything else names the variable."""
    env = {"MANGO_STATE_DIR": str(tmp_path), "MANGO_OUTPUTS_QUIET_SECONDS": value}
    with pytest.raises(ConfigurationError, match="MANGO_OUTPUTS_QUIET_SECONDS must be a number"):
        Settings.from_env(env)


def test_outputs_quiet_period_in_range(tmp_path: Path) -> None:
    """Unset gives ten seconds, a number is seconds, and 0 means only on demand (None)."""
    base = {"MANGO_STATE_DIR": str(tmp_path)}
    assert Settings.from_env(base).outputs_quiet_period == 10.0
    quiet = {**base, "MANGO_OUTPUTS_QUIET_SECONDS": "2.5"}
    assert Settings.from_env(quiet).outputs_quiet_period == 2.5
    off = {**base, "MANGO_OUTPUTS_QUIET_SECONDS": "0"}
    assert Settings.from_env(off).outputs_quiet_period is None
