"""Validation of user input: money, currencies, ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from saga import validation as _validation
from saga.exceptions import InvalidInput
from saga.purchase import money as _money


class TestAmounts:
    @pytest.mark.parametrize(
        ("text", "currency", "minor"),
        [
            ("49", "EUR", 4900),
            ("49.9", "EUR", 4990),
            ("49.90", "EUR", 4990),
            ("1000", "JPY", 1000),
            ("1.234", "KWD", 1234),
            ("0.01", "USD", 1),
        ],
    )
    def test_parses_to_minor_units(self, text, currency, minor):
        """Decimal text becomes integer minor units, with the currency's precision."""
        assert minor == _money.parse_amount(text, currency)

    @pytest.mark.parametrize(
        "text", ["", "abc", "-5", "+5", "1e3", "1,000", "49.999", "0", "0.00", "1" * 20, "NaN", " "]
    )
    def test_malformed_amounts_name_the_field(self, text):
        """Anything but a positive amount with the right precision is refused."""
        with pytest.raises(InvalidInput) as info:
            _money.parse_amount(text, "EUR", field="price")
        assert "price" == info.value.field

    def test_more_decimals_than_the_currency_has(self):
        """JPY has no minor unit: 10.5 JPY is refused."""
        with pytest.raises(InvalidInput, match="0 decimal places"):
            _money.parse_amount("10.5", "JPY")

    @given(
        st.integers(min_value=1, max_value=_money.MAX_MINOR), st.sampled_from(["EUR", "JPY", "KWD"])
    )
    def test_format_and_parse_round_trip(self, minor, currency):
        """Formatting minor units and parsing them back is the identity."""
        assert minor == _money.parse_amount(_money.format_minor(minor, currency), currency)

    @pytest.mark.parametrize("code", ["eur", "EU", "EURO", "E1R", "", None, 978])
    def test_malformed_currency(self, code):
        """Only three upper-case letters are a currency code."""
        with pytest.raises(InvalidInput) as info:
            _money.currency(code)
        assert "currency" == info.value.field


class TestIdentifiers:
    @pytest.mark.parametrize("value", ["js-101", "a", "student@example.org", "x" * 64])
    def test_accepted(self, value):
        """Letters, digits and . _ : @ - up to 64 characters."""
        assert value == _validation.identifier("intensive_id", value)

    @pytest.mark.parametrize("value", ["", " ", "a b", "x" * 65, "-x", "a\x00b", "é", None])
    def test_refused(self, value):
        """Empty, spaced, over-long, control or non-ASCII ids are refused."""
        with pytest.raises(InvalidInput) as info:
            _validation.identifier("intensive_id", value)
        assert "intensive_id" == info.value.field


class TestOperationIds:
    @pytest.mark.parametrize(
        "value", ["op-1", "8f14e45f-ceea-467f", "order #12 / retry", "x" * 128]
    )
    def test_accepted(self, value):
        """Any printable text up to 128 characters."""
        assert value == _validation.operation_id(value)

    @pytest.mark.parametrize(
        "value", ["", "   ", "x" * 129, " padded", "tab\there", "nul\x00", None]
    )
    def test_refused(self, value):
        """Blank, over-long, padded or control characters are refused."""
        with pytest.raises(InvalidInput) as info:
            _validation.operation_id(value)
        assert "operation_id" == info.value.field
