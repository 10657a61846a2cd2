"""A training job's policy acting on the wire: the adaptive policy moves a late iteration's
traffic to the higher class and back, which the links' class counters show; with a budget no
iteration exceeds, every byte stays in the job's own class. A class per transfer (layers) puts
exactly its buffers' share of the bytes in the higher class; web search's demotion puts a
flow's bytes after its first 100 kB in the lower class."""

from __future__ import annotations

import csv
import json
import statistics
import time

import pytest

from testbed.core import hostcpu
from tests.bounds import time_at_most
from tests.needs import need

from .helpers import ROOT, run_cli, run_scenario

need("horovod.torch", "Horovod is installed by install.sh")
need("torch.distributed", "torch is installed by install.sh")

N, MODEL = 3, 20_000_000


def _run(tmp_path, budget: str):
    return run_scenario(
        tmp_path,
        {
            "duration": "20s",
            "measure": {"warmup": "2s", "cooldown": "1s"},
            "topology": {"hosts": N, "link_rate": "100mbit"},
            "tc_profile": "thesis-2band",
            "workloads": {
                "horovod": {
                    "model_size": MODEL,
                    "compute_time": "300ms",
                    "tc_class": "low",
                    "policy": {"kind": "adaptive", "budget": budget, "to": "high"},
                }
            },
        },
    )


def _uplinks(summary, cls: str) -> int:
    return sum(x["classes"][cls]["bytes"] for x in summary["links"] if x["direction"] == "up")


def test_adaptive_policy_puts_late_iterations_in_the_higher_class(tmp_path):
    """Budget 0 %: each iteration (300 ms of compute, then 2 · 2/3 · 20 MB · 8 / 100 Mbit/s =
    2.1 s of ring at line rate) escalates once its compute is over, within one 0.5 s poll:
    most of its bytes cross in the high class, the rest in the low one, and nothing else
    sends."""
    s = _run(tmp_path, "0%")
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 4, h
    assert h["min_iteration_over_compute"] >= 1.0
    p = h["policy"]
    assert p["kind"] == "adaptive" and p["to"] == "high"
    assert p["escalate_after_s"] == pytest.approx(0.3)
    # every measured iteration escalated once (the window may cut one at either edge)
    assert h["iterations_measured"] - 1 <= p["escalations"] <= h["iterations_measured"] + 2, (h, p)
    log = list(csv.DictReader(open(tmp_path / "run" / "horovod" / "policy.csv")))  # noqa: SIM115
    assert [r["class"] for r in log[:4]] == ["high", "low", "high", "low"], log[:4]
    # the wire: each worker sends 2 (N - 1)/N of the model per iteration, in one class or the
    # other; the high class carries the part after each escalation (at least 2.1 - 0.5 of 2.4
    # s of a line-rate iteration, so more than half), the low one the start of each
    sent = h["iterations"] * 2 * (1 - 1 / N) * MODEL * N
    high, low = _uplinks(s, "high"), _uplinks(s, "low")
    assert sent <= high + low < 1.3 * sent + 2 * MODEL, (high, low, sent)
    assert high > 0.5 * (high + low) and low > 0.02 * (high + low), (high, low)


def test_adaptive_policy_with_a_budget_no_iteration_exceeds_stays_in_its_class(tmp_path):
    s = _run(tmp_path, "1000%")
    h = s["horovod"]
    assert s["status"] == "ok" and h["policy"]["escalations"] == 0
    high, low = _uplinks(s, "high"), _uplinks(s, "low")
    assert low > h["iterations"] * 2 * (1 - 1 / N) * MODEL * N
    assert high < 0.001 * low, (high, low)  # ARP and the like at most


def _per_transfer_job(tmp_path, policy: dict) -> dict:
    """The thesis' model (25 layers of one unit, 13 of four, 12 of twelve: 221 units), each
    layer a buffer of its own, in the thesis' schedule, alone on 3 hosts: nothing else is
    counted."""
    return run_scenario(
        tmp_path,
        {
            "duration": "12s",
            "measure": {"warmup": "2s", "cooldown": "1s"},
            "topology": {"hosts": N, "link_rate": "200mbit"},
            "tc_profile": "thesis-2band",
            "workloads": {
                "horovod": {
                    "kind": "torch-ddp",
                    "model": "thesis-ns3",
                    "model_size": "10MB",
                    "fusion": "static",
                    "fusion_threshold": "1B",
                    "queue": "priority",
                    "barrier": False,
                    "compute_time": "200ms",
                    "tc_class": "low",
                    "policy": policy,
                }
            },
        },
    )


def test_layers_puts_the_first_layers_buffers_bytes_in_the_higher_class(tmp_path):
    """The first 25 layers are 25/221 = 11.31 % of every iteration's bytes, and so of each
    class counter's payload (the ring sends 2 (N - 1)/N of every buffer, whatever its size),
    within 2 %."""
    s = _per_transfer_job(tmp_path, {"kind": "layers", "first": 25, "to": "high"})
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 3, h
    assert h["min_iteration_over_compute"] >= 1.0
    p = h["policy"]
    assert (p["kind"], p["to"], p["layers_to"], p["buffers_to"]) == ("layers", "high", 25, 25)
    assert p["share_to"] == pytest.approx(25 / 221, rel=1e-3)
    high, low = _payload(s, "high"), _payload(s, "low")
    assert high + low > h["iterations"] * 2 * (1 - 1 / N) * 10_000_000 * N
    assert high / (high + low) == pytest.approx(25 / 221, rel=0.02), (high, low)
    # the job's own sockets, read per class by the workers at the window's edges, split
    # their packets between the classes as the uplinks' class counters did over the same
    # window: every packet of a class leaves a host from one of its sockets (data and ACKs;
    # a few ARP packets besides, in the default class, high). Over the run instead, the wire
    # also counts what the job sent outside the window (its start-up, the iterations before
    # and after it, whatever its processes exchange until they are stopped), and drifts from
    # the sockets' share with the run's pace: 0.157 over the run, 0.148 by the sockets in a
    # slow CI run;
    # here 0.1632 by the sockets, 0.1632 by the wire over the window, 0.1564 over the run
    # (2026-12-02)
    t = h["tcp_by_class"]
    assert set(t) == {"low", "high"} and t["high"]["sockets"] > 0, t
    wire = {c: sum(x["classes"][c]["packet_rate_hz"] for x in s["links"] if x["direction"] == "up")
            for c in ("low", "high")}  # fmt: skip
    run = {c: sum(x["classes"][c]["packets"] for x in s["links"] if x["direction"] == "up")
           for c in ("low", "high")}  # fmt: skip
    by_sockets = t["high"]["segments_sent"] / (
        t["high"]["segments_sent"] + t["low"]["segments_sent"]
    )
    assert by_sockets == pytest.approx(wire["high"] / sum(wire.values()), rel=0.03), (t, wire, run)


def test_tail_puts_the_exposed_buffers_bytes_in_the_higher_class(tmp_path):
    """The same job with policy tail: the buffers the model of the job alone still has
    reducing when backward ends go high. Their share of every iteration's bytes is the
    policy's `share_to` (which layers, by hand on a small model: tests/unit/test_policies.py);
    the class counters' payload must put that share in the high class, within 2 %, and it
    must be neither none nor all of the job."""
    s = _per_transfer_job(tmp_path, {"kind": "tail", "to": "high"})
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 3, h
    p = h["policy"]
    assert (p["kind"], p["to"]) == ("tail", "high") and 0.05 < p["share_to"] < 0.95, p
    high, low = _payload(s, "high"), _payload(s, "low")
    assert high / (high + low) == pytest.approx(p["share_to"], rel=0.02), (high, low, p)


@pytest.mark.parametrize(
    "policy", ["by-ratio", {"kind": "interleave", "classes": ["high", "middle", "low"]}]
)
def test_by_ratio_puts_each_jobs_bytes_in_the_class_of_its_rank(tmp_path, policy):
    """examples/interleave.yaml's three jobs with policy by-ratio (or interleave with its
    classes) on thesis-3band: c (R 4.15) high, b (2.84) middle, a (2.06) low. Every byte any
    of them sends crosses the fabric link (a ring of two, one worker on each leaf: each worker
    sends its whole model each iteration), so leaf1's uplink to the spine carries, per class,
    that job's model × its iterations, in frames of 1448 B of payload: within 3 % (an
    iteration in flight at the end, the handshakes)."""
    import yaml

    data = yaml.safe_load((ROOT / "examples" / "interleave.yaml").read_text())
    data.update({"duration": "12s", "measure": {"warmup": "2s", "cooldown": "1s"},
                 "tc_profile": "thesis-3band"})  # fmt: skip
    for w in data["workloads"].values():
        w["policy"] = policy
    s = run_scenario(tmp_path, data)
    assert s["status"] == "ok"
    assert {n: s[n]["class"] for n in "abc"} == {"a": "low", "b": "middle", "c": "high"}
    assert {n: s[n]["policy"]["rank"] for n in "abc"} == {"a": 3, "b": 2, "c": 1}
    (fabric,) = [x for x in s["links"] if x["tier"] == "fabric" and x["from"] == "leaf1"]
    for name, cls in (("a", "low"), ("b", "middle"), ("c", "high")):
        model = s[name]["bytes_per_iteration"]
        rounds = max(s[name]["iterations_per_worker"].values())
        payload = fabric["classes"][cls]["bytes"] - 66 * fabric["classes"][cls]["packets"]
        assert payload == pytest.approx(model * rounds, rel=0.03), (name, payload, model, rounds)


def _payload(summary, cls: str) -> int:
    """TCP payload on the uplinks in class `cls`: the bytes less 66 B of headers a packet
    (Ethernet 14, IP 20, TCP with timestamps 32). Headers are not the job's bytes, and they
    weigh more on small buffers (a partial last segment per ring step, an ACK per message):
    the wire's bytes put 11.7 % in the high class here, the payload 11.5 %."""
    up = [x["classes"][cls] for x in summary["links"] if x["direction"] == "up"]
    return sum(c["bytes"] - 66 * c["packets"] for c in up)


def test_layers_on_a_real_ddp_job_puts_its_first_layers_gradients_in_the_higher_class(tmp_path):
    """torch-ddp in mode real (the small CNN, Gloo: DistributedDataParallel with its own
    buckets, here one), policy layers, the first 2 layers: its communication hook reduces
    conv1's and conv2's gradients (448 + 4640 of 25 578 parameters: 19.89 % of the bytes)
    over the class's connections and fc's over the job's (issue 75). The high class carries
    those layers' ring bytes, 2 (N − 1)/N × 20,352 B an iteration from each host, and no more
    than Gloo's own framing on top: each all-reduce also sends a fixed ~1.2 kB of small
    control messages a host, 4 % of this 20 kB reduction and 1 % of fc's 82 kB one. So the
    class's share of the payload comes out 1.9 % over the bytes' 19.89 % (20.27 %,
    2026-12-07): bounded here at 3 %, where fc misplaced would give 100 % and conv2 alone
    18 %."""
    s = run_scenario(tmp_path, {
        "duration": "10s",
        "measure": {"warmup": "2s", "cooldown": "1s"},
        "topology": {"hosts": N, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"kind": "torch-ddp", "mode": "real", "tc_class": "low",
                                  "policy": {"kind": "layers", "first": 2, "to": "high"}}},
    })  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 5, h
    p = h["policy"]
    assert (p["kind"], p["to"], p["layers_to"], p["buffers_to"]) == ("layers", "high", 2, None)
    assert p["share_to"] == pytest.approx(5088 / 25578, rel=1e-9)
    assert p["bytes_to"] == 5088 * 4
    high, low = _payload(s, "high"), _payload(s, "low")
    ring = 2 * (1 - 1 / N) * N  # each host sends this share of a reduction's bytes
    layers = h["iterations"] * ring * 5088 * 4
    assert layers <= high <= 1.06 * layers + 20_000, (high, layers)  # + start-up's rounds
    assert high + low >= h["iterations"] * ring * 25578 * 4, (high, low)
    assert high / (high + low) == pytest.approx(5088 / 25578, rel=0.03), (high, low)


def _real_job(tmp_path, link: str, duration: str, **job) -> dict:
    """torch-ddp in mode real training resnet18-narrow (0.70 M parameters, 2.8 MB of
    gradients) on 3 hosts, alone; its compute stated for the policies computed from it."""
    return run_scenario(tmp_path, {
        "duration": duration,
        "measure": {"warmup": "2s", "cooldown": "1s"},
        "topology": {"hosts": N, "link_rate": link},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"kind": "torch-ddp", "mode": "real",
                                  "real_model": "resnet18-narrow", "tc_class": "low", **job}},
    })  # fmt: skip


RESNET18_NARROW = 701_466  # parameters (tests/unit/test_policies.py counts them by hand)


def test_tail_on_a_real_ddp_job_puts_its_exposed_layers_gradients_in_the_higher_class(tmp_path):
    """Policy tail on a real model (issue 75): the layers the event model finds still reducing
    when backward ends, from the compute the job states (300 ms) and DDP's 256 kB buckets,
    are resnet18-narrow's first 33 (56.5 % of its bytes: the unit tests hold the model), and
    the communication hook reduces exactly their gradients over the class's connections. The
    class's share of the uplinks' payload must be that share within 3 % (Gloo's control
    messages: the layers test), and all the job's ring bytes must cross."""
    s = _real_job(tmp_path, "100mbit", "12s", compute_time="300ms", bucket_cap="256KB",
                  policy={"kind": "tail", "to": "high"})  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 5, h
    p = h["policy"]
    assert (p["kind"], p["to"], p["layers_to"], p["buffers_to"]) == ("tail", "high", 33, None)
    assert p["share_to"] == pytest.approx(0.565, abs=0.001)
    high, low = _payload(s, "high"), _payload(s, "low")
    assert high + low >= h["iterations"] * 2 * (1 - 1 / N) * N * 4 * RESNET18_NARROW
    assert high / (high + low) == pytest.approx(p["share_to"], rel=0.03), (high, low, p)


def test_adaptive_on_a_real_job_escalates_each_late_iteration_on_the_wire(tmp_path):
    """Policy adaptive on a real model: budget 0 %, so each iteration's traffic goes high once
    it has run for the compute the job states (200 ms), within one 0.5 s poll. At 20 Mbit/s
    the ring alone takes 2 · 2/3 · 2.8 MB · 8 / 20 Mbit/s = 1.5 s an iteration, so most of
    every iteration's bytes cross after its switch, in the high class, and its start in the
    low one; the policy's log alternates high and low."""
    s = _real_job(tmp_path, "20mbit", "20s", compute_time="200ms",
                  policy={"kind": "adaptive", "budget": "0%", "to": "high"})  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 4, h
    p = h["policy"]
    assert p["kind"] == "adaptive" and p["escalate_after_s"] == pytest.approx(0.2)
    assert h["iterations_measured"] - 1 <= p["escalations"] <= h["iterations_measured"] + 2, (h, p)
    log = list(csv.DictReader(open(tmp_path / "run" / "horovod" / "policy.csv")))  # noqa: SIM115
    assert [r["class"] for r in log[:4]] == ["high", "low", "high", "low"], log[:4]
    sent = h["iterations"] * 2 * (1 - 1 / N) * N * 4 * RESNET18_NARROW
    high, low = _payload(s, "high"), _payload(s, "low")
    assert sent <= high + low < 1.3 * sent + 8 * RESNET18_NARROW, (high, low, sent)
    assert high > 0.5 * (high + low) and low > 0.02 * (high + low), (high, low)


def test_web_search_demotion_puts_a_flows_bytes_after_the_threshold_in_the_lower_class(
    tmp_path,
):
    """Every flow 300 kB, demoted after 100 kB (conntrack's IP bytes of the server's side).
    By hand, per flow, from the server: SYN-ACK 60 B, an ACK of the request 52, 208 data
    packets of 1448 B of payload + 52 of headers (the last one 264 + 52), a FIN 52. conntrack
    counts a packet before the rule sees it, so the packets while the count stays under
    100,000 keep the flow's class: SYN-ACK, ACK and 66 data packets, 99,112 B, 100,064 on the
    wire (+14 B of Ethernet each); the other 142 data packets and the FIN, 211,806 B, 213,850
    on the wire, go low: 68.1 % of the server's bytes. ACKs of the fetching side go to the
    middle class (ack_class), so the two classes hold the servers' bytes only."""
    cdf = tmp_path / "sizes.csv"
    cdf.write_text("bytes,cdf\n299999,0\n300001,1\n")
    s = run_scenario(
        tmp_path,
        {
            "duration": "10s",
            "topology": {"hosts": 2, "link_rate": "100mbit"},
            "tc_profile": "thesis-3band",
            "workloads": {
                "websearch": {
                    "sizes": str(cdf),
                    "arrival_rate": 5,
                    "tc_class": "high",
                    "ack_class": "middle",
                    "demote": {"after": "100KB", "to": "low"},
                }
            },
        },
    )
    flows = list(csv.DictReader(open(tmp_path / "run" / "flows.csv")))  # noqa: SIM115
    done = sum(f["completed"] == "True" for f in flows)  # the rest: cut by the run's end
    assert done >= 50 and len(flows) - done <= 2, (done, len(flows))
    high, low = _uplinks(s, "high"), _uplinks(s, "low")
    assert 0.98 * done * 100_064 <= high <= 1.02 * len(flows) * 100_064, (high, done)
    assert 0.98 * done * 213_850 <= low <= 1.02 * len(flows) * 213_850, (low, done)
    assert _uplinks(s, "middle") > 0


def test_the_per_transfer_example_runs_in_under_a_minute_and_reports_its_classes(tmp_path):
    """A user's first taste of a class per transfer (examples/per-transfer.yaml), as they run
    it: `testbed up`, then `testbed report`, whole processes."""
    out = tmp_path / "run"
    t0, cpu0 = time.monotonic(), hostcpu.read()
    r = run_cli("up", str(ROOT / "examples" / "per-transfer.yaml"), "--out", str(out))
    took = time.monotonic() - t0
    # the time covers setup and teardown too: judged on the steal over the whole process, not
    # only the run's measured window
    cpu = hostcpu.between(cpu0, hostcpu.read())
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    p = s["horovod"]["policy"]
    assert (p["kind"], p["layers_to"], p["buffers_to"]) == ("layers", 25, 25)
    assert s["websearch"]["fct_s"]["small"]["count"] > 0
    rep = run_cli("report", str(out))
    assert rep.returncode == 0, rep.stderr
    assert "policy layers: 25 buffers (25 layers) in high, 11.3% of the bytes" in rep.stdout
    time_at_most(took, 60, cpu, "testbed up examples/per-transfer.yaml, seconds")


def test_interleaved_jobs_run_on_their_planned_slots_and_never_early(tmp_path):
    """examples/interleave.yaml: three 2-worker torch-ddp jobs whose rings all cross one
    100 Mbit/s fabric link, each about 250 ms an iteration alone, their network phases 82 % of
    that together. The plan puts them around one period of 250 ms × 1.05, at three offsets,
    with nothing left overlapping; every rank's pace log shows that no iteration began before
    its slot, and its records that none ended before its compute had run from there.

    Not the mean iteration against the slot: a job that comes into the window late and
    catches up there beats the slot on the window's mean by its lateness over the window's
    iterations (CI, 2026-12-05: job a 259.9 ms against a slot of 263.0, about one slot of
    lateness made up over 87 iterations), without any iteration starting early. How well
    the jobs keep their slots is measured, not asserted: in rank 0's pace log 98-100 % of
    iterations began on their slot on a quiet machine (3 seeds, 2026-11-28); a job whose
    first slot was t0 itself, when every worker wakes, began it 75 ms late in 1 of 3 runs
    (2026-12-05) and never got back (share 0), so the grid now begins one period after t0;
    under load a late job still lets the phases collide (docs/results/interleave/README.md; `late:
    skip` is the remedy, not yet measured under load)."""
    out = tmp_path / "run"
    r = run_cli("up", str(ROOT / "examples" / "interleave.yaml"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    t0 = json.loads((out / "a" / "go.json").read_text())["t0"]
    offsets = []
    for name in ("a", "b", "c"):
        h = s[name]
        p = h["policy"]
        assert (p["kind"], p["jobs"], p["planned_overlap_s"]) == ("interleave", 3, 0), p
        assert p["slot_s"] == p["period_s"] and p["network_s"] < 0.35 * p["slot_s"], p
        assert h["iterations"] >= 10, h  # enough slots to judge; the count is no time bound
        for host in h["iterations_per_worker"]:
            paced = list(csv.DictReader((out / name / f"iterations-{host}.pace.csv").open()))
            done = list(csv.DictReader((out / name / f"iterations-{host}.csv").open()))
            assert len(paced) == len(done) >= h["iterations"], (name, host)
            slots = [int(r["slot"]) for r in paced]
            assert slots == sorted(set(slots)), (name, host, slots)  # one slot each, in order
            for k, (pace, it) in enumerate(zip(paced, done, strict=True)):
                began, slot_time = float(pace["began"]), float(pace["slot_time"])
                assert began >= slot_time - 1e-5, (name, host, k, pace)  # CSV's 6 decimals
                # the slot's time follows from the plan alone: t0 + period + offset + slot · slot_s
                assert slot_time == pytest.approx(
                    t0 + p["period_s"] + p["offset_s"] + int(pace["slot"]) * p["slot_s"],
                    abs=1e-5,
                ), (name, host, k, pace)
                assert float(it["end"]) >= began + h["compute_time_s"] - 1e-5, (name, host, it)
        # the free time of the period, shared out after each job's phase (one arc each)
        free = p["period_s"] - sum(s[n]["policy"]["network_s"] for n in "abc")
        assert p["gap_s"] == pytest.approx(free / 3, abs=2 * p["period_s"] / 720), p
        # the pace log: every slot of the window began or was missed, none before its time
        # measured, not asserted: there is a pace log over the window (a share, not None)
        assert 0 <= p["on_slot_share"] <= 1 and p["slots_missed"] >= 0, p
        assert p["late"] == "catch-up", p
        offsets.append(p["offset_s"])
    # three distinct offsets, one period apart at most: the phases take turns
    assert len(set(offsets)) == 3 and max(offsets) < s["a"]["policy"]["period_s"], offsets
    rep = run_cli("report", str(out))
    assert rep.returncode == 0, rep.stderr
    assert "policy interleave: 3 jobs on a" in rep.stdout
    assert "of its iterations began on their slot" in rep.stdout


def test_interleaved_real_jobs_begin_each_iteration_on_its_planned_slot(tmp_path):
    """Policy interleave on two real torch-DDP jobs (issue 75): the small CNN's real forward
    and backward, 300 ms of compute stated (far more than it takes here, so each job waits for
    its slots), rings that share one 100 Mbit/s fabric link. The plan comes from the real
    model's layers (the unit tests hold it by hand); every rank's pace log shows each
    iteration on its own slot, in order, none begun before its time, the slot's time the
    plan's, and the two jobs' offsets apart by the plan's half-period share."""
    from testbed.workloads.training.policies.interleave import ON_SLOT

    job = {"kind": "torch-ddp", "mode": "real", "real_model": "small-cnn",
           "compute_time": "300ms", "policy": "interleave"}  # fmt: skip
    out = tmp_path / "run"
    s = run_scenario(tmp_path, {
        "duration": "12s",
        "measure": {"warmup": "2s", "cooldown": "1s"},
        "topology": {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
                     "link_rate": "100mbit", "oversubscription": 2},
        "tc_profile": "thesis-2band",
        "workloads": {"a": {**job, "hosts": ["h1", "h3"]}, "b": {**job, "hosts": ["h2", "h4"]}},
    })  # fmt: skip
    assert s["status"] == "ok", s.get("error")
    t0 = json.loads((out / "a" / "go.json").read_text())["t0"]
    lateness: dict[str, list[float]] = {}
    for name in ("a", "b"):
        h, p = s[name], s[name]["policy"]
        assert (p["kind"], p["jobs"], p["planned_overlap_s"], p["late"]) == (
            "interleave", 2, 0, "catch-up"), p  # fmt: skip
        assert h["iterations"] >= 10, h
        for host in h["iterations_per_worker"]:
            paced = list(csv.DictReader((out / name / f"iterations-{host}.pace.csv").open()))
            done = list(csv.DictReader((out / name / f"iterations-{host}.csv").open()))
            assert len(paced) == len(done) >= h["iterations"], (name, host)
            slots = [int(r["slot"]) for r in paced]
            assert slots == list(range(len(slots))), (name, host, slots)  # catch-up skips none
            lateness.setdefault(name, []).extend(float(r["late_s"]) for r in paced)
            for k, pace in enumerate(paced):
                began, slot_time = float(pace["began"]), float(pace["slot_time"])
                assert began >= slot_time - 1e-5, (name, host, k, pace)
                assert slot_time == pytest.approx(
                    t0 + p["period_s"] + p["offset_s"] + int(pace["slot"]) * p["slot_s"],
                    abs=1e-5,
                ), (name, host, k, pace)
        # an iteration takes a fraction of its slot (the CNN's compute, far under the 300 ms
        # stated, and its 8.75 ms ring), so it begins on its slot: the median lateness over
        # every rank's slots (the first, which builds DDP's buckets, may run over) is a time,
        # excused only as far as the run's steal explains it
        late = statistics.median(lateness[name]) / s["time_scale"]
        time_at_most(late, ON_SLOT * p["slot_s"], s, f"{name}'s median start after its slot")
    a, b = s["a"]["policy"], s["b"]["policy"]
    half = (a["period_s"] - a["network_s"] - b["network_s"]) / 2 + a["network_s"]
    apart = (b["offset_s"] - a["offset_s"]) % a["period_s"]
    assert min(apart, a["period_s"] - apart) == pytest.approx(half, abs=2 * a["period_s"] / 720)


@pytest.mark.parametrize("late", ["skip", "hold"])
def test_skipping_jobs_give_up_slots_rank_by_rank_alike_under_a_fourth_jobs_load(tmp_path, late):
    """examples/interleave.yaml with `late: skip` (or `hold`), and a fourth job (4 MB, no
    policy) on job a's hosts from 6 s to 9 s: its ring crosses the same fabric link, so the
    three jobs' phases run long and begin late while it runs, and they give slots up. The
    ranks of a job decide that on a vote, so each rank's own pace log shows the same slots,
    one by one (before the vote, one rank judged its lateness on its own clock: job b's two
    ranks began 9 of 78 iterations on different slots in one run, each then waiting for the
    other a whole period in the all-reduce). With `hold` the late iteration's network phase
    waits for the slot it gives up for: the iteration ends no earlier than that slot's time
    plus its compute (with `skip` it runs at once and ends a period or more earlier). How soon
    the jobs are back on their slots after the fourth job has gone is measured, not asserted
    (docs/results/interleave/README.md)."""
    from testbed.run.orchestrator import run
    from testbed.scenario.resolve import load_scenario, with_overrides

    skip = {"kind": "interleave", "late": late}
    s = with_overrides(
        load_scenario(ROOT / "examples" / "interleave.yaml"),
        {
            "duration": "16s",
            "measure.warmup": "3s",
            **{f"workloads.{j}.policy": skip for j in "abc"},
            "workloads.d": {"kind": "torch-ddp", "hosts": ["h1", "h4"], "model_size": "4MB",
                            "compute_time": "165ms", "start": "6s", "stop": "9s"},
        },
        base_dir=ROOT / "examples",
    )  # fmt: skip
    out = tmp_path / "run"
    summary = run(s, out=out).summary
    assert summary["status"] == "ok", summary.get("error")
    assert summary["d"]["iterations"] >= 1  # the fourth job ran
    given_up = 0
    for name in ("a", "b", "c"):
        logs = {
            host: list(csv.DictReader((out / name / f"iterations-{host}.pace.csv").open()))
            for host in summary[name]["iterations_per_worker"]
        }
        assert len(logs) == 2, logs.keys()
        x, y = logs.values()
        n = min(len(x), len(y))  # the run may stop one rank an iteration before the other
        assert n >= 10 and abs(len(x) - len(y)) <= 1, (name, len(x), len(y))
        apart = [
            (p["slot"], q["slot"])
            for p, q in zip(x[:n], y[:n], strict=True)
            if p["slot"] != q["slot"]
        ]
        assert not apart, (name, apart)  # every iteration on the same slot on both ranks
        assert [r["skipped"] for r in x[:n]] == [r["skipped"] for r in y[:n]], name
        given_up += sum(int(r["skipped"]) for r in x)
        assert summary[name]["policy"]["late"] == late
        if late == "hold":
            period = summary[name]["policy"]["slot_s"]
            compute = summary[name]["compute_time_s"]
            for host, rows in logs.items():
                ends = {
                    int(r["iteration"]): float(r["end"])
                    for r in csv.DictReader((out / name / f"iterations-{host}.csv").open())
                }
                for i, row in enumerate(rows[1:]):  # row i + 1 follows iteration i
                    n = int(row["skipped"])
                    if n and i in ends:
                        held = ends[i] - float(rows[i]["slot_time"])
                        assert held >= n * period + compute, (name, host, i, n, held)
    # the fourth job made the others late past their gap: they gave slots up
    assert given_up >= 1, given_up
