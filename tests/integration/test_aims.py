"""A sweep with aims, end to end on real namespaces: 2 schemes × 3 seeds of a scenario whose
aim physics decides. Bulk TCP on every host link (linkcheck's ring) in the web-search
flows' band ("same") or below it ("low"): in "same" a small flow waits behind the bulk
flow's standing queue (up to 1000 packets: ~120 ms at 100 Mbit/s), in "low" strict priority
lets it pass an empty high band. So "small flows at least 50 % faster in low" must hold, and
"small flows no faster in low" must miss, on every seed and in the interval."""

from __future__ import annotations

import csv
import json
import os

import yaml

from .helpers import run_cli

BASE = {
    "name": "aims",
    "duration": "7s",
    "measure": {"warmup": "1s", "cooldown": "1s"},
    "topology": {"hosts": 3, "link_rate": "100mbit"},
    "tc_profile": "thesis-2band",
    "workloads": {
        "bulk": {"kind": "linkcheck", "pattern": "ring", "short": False},
        "websearch": {"arrival_rate": 6, "tc_class": "high", "sizes": "small.csv"},
    },
}
SWEEP = {
    "name": "aims",
    "base": "base.yaml",
    "paired": {
        "scheme": {
            "same": {"workloads.bulk.bulk_classes": ["high"]},
            "low": {"workloads.bulk.bulk_classes": ["low"]},
        }
    },
    "seeds": [1, 2, 3],
    "compare": {"axis": "scheme", "baseline": "same"},
    "aims": [
        "websearch.fct_s.small.mean change <= -50% (low)",
        "websearch.fct_s.small.mean change >= 0% (low)",
    ],
}


def test_a_sweep_decides_an_aim_physics_decides(tmp_path):
    (tmp_path / "small.csv").write_text("bytes,cdf\n10000,0\n50000,1\n")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    out = tmp_path / "out"
    r = run_cli("sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), timeout=600,
                env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "holds" in r.stdout and "misses" in r.stdout, r.stdout  # the verdicts at the end

    rows = list(csv.DictReader((out / "sweep.csv").read_text().splitlines()))
    assert [(x["seed"], x["scheme"]) for x in rows] == [
        ("1", "same"), ("1", "low"), ("2", "low"), ("2", "same"), ("3", "same"), ("3", "low"),
    ]  # fmt: skip  # alternating: ABBA
    doc = json.loads((out / "sweep.json").read_text())
    judged = {j["aim"]: j for j in doc["verdicts"]["judged"]}
    faster, slower = (judged[a] for a in SWEEP["aims"])
    assert faster["n"] == 3 and all(x < -50 for x in faster["per_seed"].values()), faster
    assert faster["verdict"] == "holds" and faster["interval"][1] <= -50
    assert slower["verdict"] == "misses" and slower["interval"][1] < 0
    assert doc["verdicts"]["decided"] is True

    r = run_cli("report", str(out), "--json", "--no-plots")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdicts"]["judged"] == doc["verdicts"]["judged"]
