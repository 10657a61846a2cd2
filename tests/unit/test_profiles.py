import pytest
from pydantic import ValidationError

from testbed.shaping.profile import TcProfile, load_profile_data, parse_dscp, shipped_profiles


def test_shipped_profiles_load():
    assert {"fifo", "thesis-2band"} <= set(shipped_profiles())
    for name in shipped_profiles():
        TcProfile.model_validate(load_profile_data(name, None))


def test_thesis_2band_semantics():
    p = TcProfile.model_validate(load_profile_data("thesis-2band", None))
    assert p.class_names == ["high", "low"]  # priority order
    assert p.default == "high"  # unmarked traffic and ARP never starve
    assert p.class_of(46) == "high" and p.class_of(8) == "low" and p.class_of(0) == "high"
    assert all(c.limit == 1000 for c in p.classes)
    assert p.cls("low").mark == 8 and p.cls("high").mark == 46


@pytest.mark.parametrize(
    ("v", "d"), [("EF", 46), ("ef", 46), ("AF41", 34), ("CS1", 8), (10, 10), ("LE", 1), ("12", 12)]
)
def test_dscp_names(v, d):
    assert parse_dscp(v) == d


@pytest.mark.parametrize("v", [64, -1, "XX", True, 1.5])
def test_bad_dscp(v):
    with pytest.raises(ValueError):
        parse_dscp(v)


@pytest.mark.parametrize(
    ("classes", "default", "match"),
    [
        ([{"name": "a", "dscp": [1]}, {"name": "a", "dscp": [2]}], None, "unique"),
        ([{"name": "a", "dscp": [1]}, {"name": "b", "dscp": [1]}], None, "DSCP 1 is in both"),
        ([{"name": "a"}, {"name": "b"}], "a", "no dscp values and is not the default"),
        ([{"name": "a", "dscp": [1]}], "zz", "is not a class"),
        (
            [{"name": "a", "dscp": [1], "guaranteed": 0.7}, {"name": "b", "guaranteed": 0.7}],
            "b",
            "add up",
        ),
    ],
)
def test_inconsistent_profiles(classes, default, match):
    with pytest.raises(ValidationError, match=match):
        TcProfile.model_validate({"name": "p", "classes": classes, "default": default})
