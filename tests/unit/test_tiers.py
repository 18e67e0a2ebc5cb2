"""The suite's tiers name real modules: a renamed test module must not drop out of the pass or release it was put in
(tests/tiers.py; the noxfile's `tests` session runs them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiers

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("listing", ["ONE_RELEASE_TESTS", "TRANSFORMERS_TESTS", "QUICK_TESTS"])
def test_each_module_a_tier_names_is_a_test_module_of_the_suite(listing: str) -> None:
    missing = [path for path in getattr(tiers, listing) if not (ROOT / path).is_file()]
    assert not missing, f"tiers.{listing} names modules that are not there: {missing}"

