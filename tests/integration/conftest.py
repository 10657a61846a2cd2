"""Every integration test checks that it left nothing behind, and cleans up if it did, so one
failure cannot cascade into the tests after it. Runs this session did not start (someone's
experiment on the same machine) are neither counted nor touched."""

import pytest

from testbed.core.state import all_states
from testbed.network.runtime.registry import teardown

from .helpers import foreign_runs, present_objects


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = present_objects()
    known = {st.run_id for st in all_states()}
    yield
    after = present_objects()
    ids, _ = foreign_runs()
    if after - before:
        for st in all_states():
            if st.run_id not in known and st.run_id not in ids:
                teardown(st)
                st.remove()
    assert after <= before, f"left behind: {sorted(after - before)}"
