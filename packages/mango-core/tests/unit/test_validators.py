"""The one set of number checks every layer uses: one behaviour, one message shape."""

from __future__ import annotations

import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mango.provider
from mango.domain import ConfigurationError, InvalidInput, validators
from mango.domain.validators import (
    non_negative_number,
    number_setting,
    positive_int,
    positive_number,
)


@attrs.frozen
class Budget:
    """A value using every validator, as values and providers do."""

    timeout: float = attrs.field(default=1.0, validator=positive_number)
    attempts: int = attrs.field(default=1, validator=positive_int)
    wait: float = attrs.field(default=0.0, validator=non_negative_number)
    limit: int | None = attrs.field(default=None, validator=attrs.validators.optional(positive_int))


NOT_NUMBERS = [True, False, None, "1", b"1", [1], float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0, -1, -0.5, 0.0])
def test_positive_number_refuses_bool_nan_infinities_and_non_positive(value: object) -> None:
    """``bool`` is not a number; NaN and infinities are not finite; zero is not positive."""
    with pytest.raises(InvalidInput, match=r"timeout must be a finite positive number, got "):
        Budget(timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0, -1, 1.0, 2.5])
def test_positive_int_refuses_everything_but_whole_positive_ints(value: object) -> None:
    """A float, even a whole one, is not an integer."""
    with pytest.raises(InvalidInput, match=r"attempts must be a positive integer, got "):
        Budget(attempts=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [*NOT_NUMBERS, -1, -0.001])
def test_non_negative_number_refuses_negatives_and_non_numbers(value: object) -> None:
    """Zero passes; below it, or not a finite number, does not."""
    with pytest.raises(InvalidInput, match=r"wait must be a finite non-negative number, got "):
        Budget(wait=value)  # type: ignore[arg-type]


@given(
    st.floats(min_value=1e-300, max_value=1e300, allow_nan=False),
    st.integers(min_value=1, max_value=2**63),
)
def test_finite_positive_values_pass(number: float, whole: int) -> None:
    """Every finite positive number and positive int passes, None where it is optional."""
    budget = Budget(timeout=number, attempts=whole, wait=number, limit=whole)
    assert (budget.timeout, budget.attempts, budget.limit) == (number, whole, whole)
    assert Budget(wait=0, limit=None).wait == 0


def test_number_setting_names_the_variable_and_the_range() -> None:
    """Unset and empty are None; text, NaN, infinities and out-of-range values are refused."""
    assert number_setting({}, "X", minimum=0, maximum=1) is None
    assert number_setting({"X": "  "}, "X", minimum=0, maximum=1) is None
    assert number_setting({"X": " 0.5 "}, "X", minimum=0, maximum=1) == 0.5
    assert number_setting({"X": "7"}, "X", minimum=1, maximum=9, integer=True) == 7
    for text in ("nan", "inf", "-inf", "2", "-1", "abc", "1e300"):
        with pytest.raises(ConfigurationError, match=r"X must be a number from 0 to 1 s, got"):
            number_setting({"X": text}, "X", minimum=0, maximum=1, unit="s")
    for text in ("1.5", "1e3", "0x10"):
        with pytest.raises(ConfigurationError, match=r"X must be a whole number from 1 to 9"):
            number_setting({"X": text}, "X", minimum=1, maximum=9, integer=True)
    assert math.isfinite(validators.MAX_SETTING_SECONDS)


def test_the_provider_surface_re_exports_the_same_validators() -> None:
    """Provider distributions import only mango.provider: there, the very same functions."""
    for name in validators.__all__:
        assert getattr(mango.provider, name) is getattr(validators, name)
        assert name in mango.provider.__all__
