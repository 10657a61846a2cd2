"""Every integration test checks that it left nothing behind."""

import pytest

from .helpers import present_objects


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = present_objects()
    yield
    after = present_objects()
    assert after <= before, f"left behind: {sorted(after - before)}"
