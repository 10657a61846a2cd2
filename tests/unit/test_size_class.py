"""pFabric's flow-size bins, as the thesis reports FCT: small (0, 100 KB], medium (100 KB, 10 MB],
large (10 MB, ∞), each closed at the top; KB and MB are decimal (10^3 and 10^6 bytes), as the
thesis' web-search CDF (points at 10,000 ... 30,000,000 bytes) and its 1.7 MB mean flow size."""

import pytest

from testbed.core.stats import size_class


@pytest.mark.parametrize(
    ("nbytes", "cls"),
    [
        (1, "small"),
        (99_999, "small"),
        (100_000, "small"),  # exactly 100 KB: the top of (0, 100 KB]
        (100_001, "medium"),
        (102_400, "medium"),  # 100 KiB is more than 100 KB
        (9_999_999, "medium"),
        (10_000_000, "medium"),  # exactly 10 MB: the top of (100 KB, 10 MB]
        (10_000_001, "large"),
        (10_485_760, "large"),  # 10 MiB
        (30_000_000, "large"),  # the web-search CDF's largest flow
    ],
)
def test_size_class_boundaries(nbytes, cls):
    assert size_class(nbytes) == cls
