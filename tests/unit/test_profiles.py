import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from testbed.core.profile import TcProfile, load_profile_data, parse_dscp, shipped_profiles


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


def _classes(n: int) -> list[dict]:
    return [{"name": f"c{i}", "dscp": [i + 1]} for i in range(n)]


def test_eight_classes_fit_htb_priorities():
    p = TcProfile.model_validate({"name": "p", "classes": _classes(8)})
    assert len(p.classes) == 8


def test_nine_classes_are_refused_htb_has_eight_priorities():
    """The plan gives class i HTB prio i; the kernel clamps prio > 7 to 7, so a 9th class
    would silently share priority 7 with the 8th, round-robin."""
    with pytest.raises(ValidationError) as e:
        TcProfile.model_validate({"name": "p", "classes": _classes(9)})
    (err,) = e.value.errors()
    assert err["loc"] == ("classes",)
    assert "9 classes, but HTB has only 8 priorities (0–7)" in err["msg"]
    assert "use at most 8 classes" in err["msg"]


def test_nine_classes_in_a_scenario_name_the_field(tmp_path):
    from testbed.core.errors import ScenarioError
    from testbed.scenario.resolve import load_scenario

    rows = "".join(f"  - {{name: c{i}, dscp: [{i + 1}]}}\n" for i in range(9))
    (tmp_path / "nine.yaml").write_text(f"name: nine\nclasses:\n{rows}")
    (tmp_path / "s.yaml").write_text("name: t\ntopology: {hosts: 2}\ntc_profile: nine.yaml\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(tmp_path / "s.yaml")
    msg = str(e.value)
    assert "\n" not in msg
    assert "tc_profile.classes: 9 classes, but HTB has only 8 priorities" in msg


def test_an_installed_testbed_ships_its_profiles(tmp_path):
    """A wheel (pip install ., not editable) must hold the shipped profiles: on the GPU machine
    a non-editable install once found none, and every scenario naming thesis-2band failed."""
    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"  # a copy: setuptools builds in place (build/, *.egg-info)
    shutil.copytree(root / "testbed", src / "testbed", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(root / f, src / f)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("testbed-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "thesis-2band" in shipped_profiles()
    assert {f"testbed/tc_profiles/{n}.yaml" for n in shipped_profiles()} <= names
