#!/usr/bin/env python3
"""Precision per machine-hour of the thesis cells' paired comparison, measured from packed runs.

    .venv/bin/python docs/results/precision/precision.py DATA_DIR... [--batch 3]
        [--plot halfwidth.png] [--budgets 4,8,16,32]

DATA_DIR: a folder of packed runs (docs/results/STUDY/data/NAME, one .tar.xz a run, unpacked to a
temporary folder), a sweep's output (with runs/) or a folder of run folders. Every run needs
point.json (labels: seed, scheme, and cell, point or factor; wall_s), summary.json and
iterations.csv. Groups are (the folder's name, the cell); "cell" carries the sweep's own label
(r2-12.5%, r2-12.5%-x200, r4-12.5%; an ablation factor as r4-12.5%[fifo]).

What it prints (numpy only; every interval is a two-sided 95 % Student t interval):

1. the runs used, their wall time and the fixed overhead per run (wall_s - duration x time_scale);
2. per group: the paired change of the job's mean iteration time, low against same, by seed,
   its mean, sd and t half-width over the seeds, the machine hours it took; beside it the
   half-width the iterations alone give (batch means within each run, design (c));
3. within a run: the per-iteration series of the measured window (the mean over the workers of
   each iteration whose every row the summary counts: it reproduces summary.json's mean), its
   count, lag-1..5 autocorrelation (pooled over the runs of a scheme), the standard error of
   the run's mean from the iterations (naive s/sqrt(n) and batch means of 2..5 iterations)
   against the spread of the run means over the seeds under the same scheme;
4. the paired change's variance over the seeds split into the part the runs' own iterations
   explain and the rest (a per-seed-and-scheme component), and a two-way split of the run
   means (seed x scheme) where a folder holds several schemes on the same seeds;
5. projections: the half-width for (a) more seeds at 12 s, (b) fewer seeds of 24 s and 48 s,
   (c) iterations as samples (batch means), (d) the same runs with more of each run counted
   for the job (--extend), at a few machine-hour budgets and as hours to a target, and a plot.
   Model: a seed's paired change has variance extra + w x (iterations at 12 s / iterations at
   T), w measured from the runs' iterations, extra = max(0, s2 over seeds - w) kept fixed
   ("extra kept") or 0 ("no extra"); a run costs overhead + T x time_scale of machine time.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------- Student t and F, numpy-free


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (Numerical Recipes' betacf)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_q(p: float, df: float) -> float:
    """Quantile of Student's t (bisection; df may be fractional)."""
    if df <= 0 or not math.isfinite(df):
        return float("nan")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def f_sf(f: float, d1: float, d2: float) -> float:
    """P(F > f) for F(d1, d2)."""
    if f <= 0:
        return 1.0
    return 1.0 - betainc(d1 / 2.0, d2 / 2.0, d1 * f / (d1 * f + d2))


def f_q(p: float, d1: float, d2: float) -> float:
    """Quantile of F(d1, d2) (bisection on the log scale)."""
    lo, hi = -20.0, 20.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 1.0 - f_sf(math.exp(mid), d1, d2) < p:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


T975: dict[float, float] = {}


def t975(df: float) -> float:
    if df not in T975:
        T975[df] = t_q(0.975, df)
    return T975[df]


# ---------------------------------------------------------------- loading


def unpack(folder: Path, tmp: Path) -> Path:
    packed = sorted(folder.glob("*.tar.xz"))
    if not packed:
        return folder / "runs" if (folder / "runs").is_dir() else folder
    out = tmp / folder.name
    out.mkdir(parents=True, exist_ok=True)
    for f in packed:
        with tarfile.open(f) as t:
            try:
                t.extractall(out, filter="data")
            except TypeError:  # Python < 3.12
                t.extractall(out)
    return out


def cell_of(labels: dict, summary: dict, scenario: str) -> tuple[str, str] | None:
    scheme = labels.get("scheme")
    if "cell" in labels:
        return labels["cell"], scheme
    if "point" in labels:  # "r4-12.5%-same"
        cell, _, scheme = labels["point"].rpartition("-")
        return cell, scheme
    h = summary.get("horovod") or {}
    ct = h.get("compute_time_s")
    m = re.search(r"^\s+utilization:\s*([0-9.]+)", scenario, re.M)
    if ct and m and scheme:
        base = f"r{round(ct / 0.14):d}-{float(m.group(1)):g}%"
        extra = "".join(f"[{v}]" for k, v in labels.items() if k not in ("seed", "scheme"))
        return base + extra, scheme
    return None


def load_run(d: Path, folder: str, extend: str = "cooldown") -> dict | None:
    try:
        point = json.loads((d / "point.json").read_text())
        s = json.loads((d / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if s.get("status", "ok") != "ok" or "horovod" not in s or not (d / "iterations.csv").exists():
        return None
    scen = (d / "scenario.yaml").read_text() if (d / "scenario.yaml").exists() else ""
    cs = cell_of(point.get("labels", {}), s, scen)
    if cs is None:
        return None
    cell, scheme = cs
    ts = float(s.get("time_scale") or 1.0)
    w = s["window"]
    start, stop, t0 = float(w["start"]), float(w["stop"]), float(w["t0"])
    with open(d / "iterations.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    inside = [r for r in rows if start <= float(r["start"]) < stop and float(r["end"]) <= stop]
    by_it: dict[int, list] = defaultdict(list)
    for r in inside:
        by_it[int(r["iteration"])].append(r)
    workers = s["horovod"].get("workers") or len({r["worker"] for r in rows})
    its = sorted(by_it)
    full = [i for i in its if len(by_it[i]) == workers]  # every worker's row inside
    x = np.array([np.mean([float(r["duration_s"]) for r in by_it[i]]) for i in full])
    x0 = np.array([float(r["duration_s"]) for i in full for r in by_it[i] if r["rank"] == "0"])
    t_start = np.array([(min(float(r["start"]) for r in by_it[i]) - t0) / ts for i in full])
    allrows = np.array([float(r["duration_s"]) for r in inside])
    # design (d): more of the run for the job. "cooldown": the window's start to the run's end
    # (the cool-down's iterations too); "all": from the third iteration (index >= 2: the first
    # is compute alone, the second the first allreduce) to the run's end
    end = t0 + float(s["duration_s"]) * ts
    whole: dict[int, list] = defaultdict(list)
    for r in rows:
        first = int(r["iteration"]) >= 2 if extend == "all" else float(r["start"]) >= start
        if first and float(r["end"]) <= end:
            whole[int(r["iteration"])].append(float(r["duration_s"]))
    x_ext = np.array([np.mean(v) for i, v in sorted(whole.items()) if len(v) == workers])
    # web-search bytes offered during each iteration (flows starting in it), for the flows' role
    flow_bytes = None
    fpath = d / "flows.csv"
    if fpath.exists() and len(full):
        with open(fpath, newline="") as f:
            fs = np.array([(float(r["start"]), float(r["size_bytes"])) for r in csv.DictReader(f)])
        if len(fs):
            order = np.argsort(fs[:, 0])
            fst, fsz = fs[order, 0], np.cumsum(fs[order, 1])
            fsz = np.concatenate([[0.0], fsz])
            edges_s = [min(float(r["start"]) for r in by_it[i]) for i in full]
            edges_e = [max(float(r["end"]) for r in by_it[i]) for i in full]
            a = np.searchsorted(fst, edges_s)
            b = np.searchsorted(fst, edges_e)
            flow_bytes = fsz[b] - fsz[a]
            win_bytes = fsz[np.searchsorted(fst, stop)] - fsz[np.searchsorted(fst, start)]
    return {
        "folder": folder, "name": d.name, "cell": cell, "scheme": scheme,
        "seed": str(point.get("labels", {}).get("seed", s.get("seed"))),
        "ts": ts, "duration": float(s["duration_s"]),
        "warmup": float(w.get("warmup_s", 0)), "cooldown": float(w.get("cooldown_s", 0)),
        "span": float(w.get("span_s", (stop - start) / ts)),
        "wall": float(point.get("wall_s") or s.get("wall_s") or float("nan")),
        "started": float(s.get("started_at", t0)), "cores": (s.get("host_cpu") or {}).get("cores"),
        "summary_mean": float(s["horovod"]["iteration_time_s"]["mean"]),
        "rows_mean": float(allrows.mean()) if len(allrows) else float("nan"),
        "x": x, "x0": x0, "x_ext": x_ext, "t": t_start, "flow_bytes": flow_bytes,
        "win_bytes": win_bytes if flow_bytes is not None else None,
        "dropped_partial": len(its) - len(full),
    }  # fmt: skip


# ---------------------------------------------------------------- within a run


def acf(x: np.ndarray, k: int) -> float:
    x = x - x.mean()
    den = float((x * x).sum())
    return float((x[:-k] * x[k:]).sum() / den) if len(x) > k and den > 0 else float("nan")


def pooled_acf(xs: list[np.ndarray], k: int) -> float:
    num = den = 0.0
    for x in xs:
        y = x - x.mean()
        den += float((y * y).sum())
        if len(y) > k:
            num += float((y[:-k] * y[k:]).sum())
    return num / den if den > 0 else float("nan")


def var_of_mean(x: np.ndarray, b: int) -> tuple[float, int]:
    """Variance of the run's mean from its iterations: b = 1 the naive s^2/n; b > 1 batch
    means of b consecutive iterations (the remainder at the end left out), b*var(batch)/n.
    Returns (variance, degrees of freedom)."""
    n = len(x)
    nb = n // b
    if nb < 2:
        return float("nan"), 0
    bm = x[: nb * b].reshape(nb, b).mean(axis=1)
    return b * float(bm.var(ddof=1)) / n, nb - 1


# ---------------------------------------------------------------- projections


class Design:
    """The paired change's variance per seed at a run of T s: extra + w x (window at 12 s over
    window at T), where w is the within-run part measured at the base window W0 (two runs'
    iterations) and extra what the seeds spread beyond it (kept fixed: it does not shrink with
    a longer run; keep=False sets it to 0). Cost: two runs a seed, each overhead + T x K of
    machine time."""

    def __init__(self, *, over, ts, T0, W0, extra, w, nit, ext, b):
        self.over, self.ts, self.T0, self.W0 = over, ts, T0, W0
        self.edge = T0 - W0  # warm-up + cool-down
        self.extra, self.w, self.nit, self.ext, self.b = extra, w, nit, ext, b

    def cost(self, n: int, T: float) -> float:
        """Machine hours of n seeds, both schemes, runs of T s back to back."""
        return n * 2 * (self.over + T * self.ts) / 3600

    def ratio(self, T: float, whole: bool) -> float:
        """Iterations a run at T over those of the base window. The window grows with T; the
        longer window of design (d) keeps the measured excess (ext - 1) x W0 and grows with T."""
        if whole:
            return (self.ext * self.W0 + (T - self.T0)) / self.W0
        return (T - self.edge) / self.W0

    def hw_seeds(self, n: int, T: float, keep: bool, whole: bool = False) -> float:
        """Designs (a), (b), (d): a t interval over n seeds' paired changes."""
        if n < 2:
            return float("inf")
        var = (self.extra if keep else 0.0) + self.w / self.ratio(T, whole)
        return t975(n - 1) * math.sqrt(var / n)

    def hw_iters(self, n: int, T: float, whole: bool = False) -> float:
        """Design (c): the within-run variance alone (batch means), n pairs pooled; degrees of
        freedom n x (batches a run - 1)."""
        nb = int(self.nit * self.ratio(T, whole)) // self.b
        df = n * (nb - 1)
        return t975(df) * math.sqrt(self.w / self.ratio(T, whole) / n) if df > 0 else float("inf")


# ---------------------------------------------------------------- report


def fmt(v: float, p: int = 1, sign: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "-"
    return f"{v:+.{p}f}" if sign else f"{v:.{p}f}"


def table(title: str, head: list[str], rows: list[list[str]]) -> None:
    print(f"\n## {title}\n")
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w[i]) if i else h.ljust(w[i]) for i, h in enumerate(head)))
    for r in rows:
        print("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", nargs="+", type=Path)
    ap.add_argument(
        "--batch",
        type=int,
        default=3,
        help="iterations a batch for the within-run variance (default 3)",
    )
    ap.add_argument(
        "--cells",
        default="r2-12.5%,r4-12.5%",
        help="base cells to analyse (variants: -x200, [factor])",
    )
    ap.add_argument("--budgets", default="4,8,16,32", help="machine hours for the projections")
    ap.add_argument(
        "--targets", default="5,2.5,1", help="half-widths (points) to reach, for the hours column"
    )
    ap.add_argument(
        "--plot", type=Path, default=None, help="half-width against machine hours (png)"
    )
    ap.add_argument("--xmax", type=float, default=64, help="the plot's hours axis")
    ap.add_argument(
        "--extend",
        choices=("cooldown", "all"),
        default="cooldown",
        help="design (d): add the cool-down's iterations (default), or every one from the third",
    )
    ap.add_argument("--all", action="store_true", help="project the ablation's factors too")
    ap.add_argument("--same", default="same")
    ap.add_argument("--low", default="low")
    a = ap.parse_args()
    bases = a.cells.split(",")
    B = a.batch

    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="precision-") as tmp:
        for folder in a.data:
            root = unpack(folder, Path(tmp))
            for d in sorted(p for p in root.iterdir() if p.is_dir()):
                r = load_run(d, folder.name, a.extend)
                if r and any(
                    r["cell"] == c
                    or r["cell"].startswith(c + "-x")
                    or r["cell"].startswith(c + "[")
                    for c in bases
                ):
                    runs.append(r)
    if not runs:
        print("no runs of the cells in", *a.data, file=sys.stderr)
        return 2
    for r in runs:
        r["mean"] = float(r["x"].mean())
        r["n"] = len(r["x"])
        r["over"] = r["wall"] - r["duration"] * r["ts"]
        assert abs(r["mean"] - r["summary_mean"]) < 1e-9 or r["dropped_partial"], (
            r["name"],
            r["mean"],
            r["summary_mean"],
        )

    groups: dict[tuple[str, str], dict[str, dict[str, dict]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for r in runs:
        groups[(r["folder"], r["cell"])][r["scheme"]][r["seed"]] = r

    # ------------------------------------------------------------ 1. inventory
    rows = []
    for (folder, cell), by_scheme in sorted(groups.items()):
        rs = [r for s in by_scheme.values() for r in s.values()]
        schemes = ",".join(f"{k}:{len(v)}" for k, v in sorted(by_scheme.items()))
        rows.append([f"{folder} {cell}", str(len(rs)), f"{rs[0]['ts']:g}", f"{rs[0]['duration']:g}/{rs[0]['span']:g}",
                     f"{min(r['n'] for r in rs)}-{max(r['n'] for r in rs)}",
                     fmt(np.mean([r["wall"] for r in rs]), 0), fmt(np.median([r["over"] for r in rs]), 0),
                     f"{min(r['over'] for r in rs):.0f}-{max(r['over'] for r in rs):.0f}", schemes])  # fmt: skip
    table(
        "1. runs (wall s; overhead = wall - duration x time_scale, s)",
        [
            "folder cell",
            "runs",
            "K",
            "T/window s",
            "iters",
            "wall",
            "overhead med",
            "range",
            "schemes:seeds",
        ],
        rows,
    )
    over_all = np.array([r["over"] for r in runs])
    print(
        f"\nfixed overhead per run, all {len(runs)} runs: median {np.median(over_all):.0f} s, "
        f"mean {over_all.mean():.0f} s, max {over_all.max():.0f} s "
        "(set-up, the iteration in flight at the stop, drain, teardown)"
    )

    # ------------------------------------------------------------ 2. paired change
    def vd(S: dict, L: dict, b: int, key: str = "x") -> tuple[float, float]:
        """Within-run variance of D = 100 (L/S - 1) from the two runs' iterations (delta
        method, the two runs' noise taken as independent) and its Welch degrees of freedom."""
        vs, ds = var_of_mean(S[key], b)
        vl, dl = var_of_mean(L[key], b)
        ms, ml = S[key].mean(), L[key].mean()
        cl, cs = 1e4 * (ml / ms) ** 2 * vl / ml**2, 1e4 * (ml / ms) ** 2 * vs / ms**2
        df = (cl + cs) ** 2 / (cl**2 / dl + cs**2 / ds) if dl and ds else 0.0
        return cl + cs, df

    paired = {}
    rows, rows_d, rows_e = [], [], []
    for (folder, cell), by_scheme in sorted(groups.items()):
        S, L = by_scheme.get(a.same, {}), by_scheme.get(a.low, {})
        seeds = sorted(set(S) & set(L), key=lambda s: (len(s), s))
        if len(seeds) < 2:
            continue
        D = np.array([100 * (L[s]["mean"] / S[s]["mean"] - 1) for s in seeds])
        n = len(D)
        sd = float(D.std(ddof=1))
        hw = t975(n - 1) * sd / math.sqrt(n)
        hours = sum(S[s]["wall"] + L[s]["wall"] for s in seeds) / 3600
        vw = {b: [vd(S[s], L[s], b) for s in seeds] for b in (1, 2, 3, 4, 5)}
        w = {b: float(np.mean([v for v, _ in vw[b]])) for b in vw}
        # design (c) on these runs: the seeds' D averaged, each one's variance from its iterations
        df_c = sum(d for _, d in vw[B])
        hw_c = t975(df_c) * math.sqrt(w[B] / n) if df_c else float("nan")
        # design (d) on these runs: more of the run (--extend)
        De = np.array([100 * (L[s]["x_ext"].mean() / S[s]["x_ext"].mean() - 1) for s in seeds])
        ve = [vd(S[s], L[s], B, "x_ext") for s in seeds]
        ne = np.mean([min(len(S[s]["x_ext"]), len(L[s]["x_ext"])) for s in seeds])
        nw = np.mean([min(S[s]["n"], L[s]["n"]) for s in seeds])
        paired[(folder, cell)] = dict(seeds=seeds, D=D, sd=sd, hw=hw, hours=hours, w=w, S=S, L=L,
                                      ext_ratio=ne / nw, n_it=nw, df_c=df_c)  # fmt: skip
        walls = [S[s]["wall"] for s in seeds] + [L[s]["wall"] for s in seeds]
        rows.append([f"{folder} {cell}", str(n), " ".join(f"{d:+.1f}" for d in D), fmt(D.mean(), 1, True),
                     fmt(sd, 1), fmt(hw, 1), f"{min(walls):.0f}-{max(walls):.0f}", fmt(hours, 2),
                     fmt(hw * math.sqrt(hours), 1), f"{fmt(hw_c, 1)} ({df_c:.0f} df)"])  # fmt: skip
        sde = float(De.std(ddof=1))
        we = float(np.mean([v for v, _ in ve]))
        rows_e.append([f"{folder} {cell}", " ".join(f"{d:+.1f}" for d in De), fmt(De.mean(), 1, True),
                       fmt(sde, 1), fmt(t975(n - 1) * sde / math.sqrt(n), 1), f"{nw:.0f} -> {ne:.0f}",
                       f"{fmt(w[B], 1)} -> {fmt(we, 1)}"])  # fmt: skip
        s2 = sd**2
        F = s2 / w[B]
        rows_d.append([f"{folder} {cell}", fmt(s2, 1), *(fmt(w[b], 1) for b in (1, 2, 3, 4, 5)),
                       fmt(s2 - w[B], 1, True), f"{min(1.0, w[B] / s2):.0%}" if s2 > 0 else "-",
                       f"{F:.2f} (p {f_sf(F, n - 1, df_c):.2f})"])  # fmt: skip
    table("2. paired change of the mean iteration time, low vs same, % (by seed; t interval over seeds)",
          ["folder cell", "seeds", "D by seed", "mean", "sd", "hw95", "wall s", "hours",
           "hw*sqrt(h)", f"hw95 iterations (c, b={B})"], rows)  # fmt: skip
    table(
        f"2d. the same runs, more of each run for the job (--extend {a.extend}: "
        + (
            "the window's start to the run's end)"
            if a.extend == "cooldown"
            else "iteration 2 to the run's end)"
        ),
        [
            "folder cell",
            "D by seed",
            "mean",
            "sd",
            "hw95",
            "iterations a run",
            f"within var (b={B})",
        ],
        rows_e,
    )

    # ------------------------------------------------------------ 3. within a run
    rows = []
    pool_F = defaultdict(lambda: [0.0, 0, 0.0, 0])
    for (folder, cell), by_scheme in sorted(groups.items()):
        for scheme, by_seed in sorted(by_scheme.items()):
            rs = list(by_seed.values())
            xs = [r["x"] for r in rs]
            ns = [len(x) for x in xs]
            ac = [pooled_acf(xs, k) for k in (1, 2, 3, 4, 5)]
            sd_it = math.sqrt(np.mean([x.var(ddof=1) for x in xs]))
            se = {
                b: math.sqrt(np.nanmean([var_of_mean(x, b)[0] for x in xs]))
                for b in (1, 2, 3, 4, 5)
            }
            means = np.array([r["mean"] for r in rs])
            k = len(rs)
            between = float(means.std(ddof=1)) if k > 1 else float("nan")
            Fcol = "-"
            if k > 1:
                dfw = sum(var_of_mean(x, B)[1] for x in xs)
                Fb = between**2 / se[B] ** 2
                Fcol = f"{Fb:.1f} (p {f_sf(Fb, k - 1, dfw):.2f})"
                acc = pool_F[f"{folder} {cell}"]
                acc[0] += (k - 1) * between**2
                acc[1] += k - 1
                acc[2] += k * se[B] ** 2
                acc[3] += k
            r0 = np.mean([acf(r["x0"], 1) for r in rs if len(r["x0"]) > 2])
            fb = [
                np.corrcoef(r["x"], r["flow_bytes"])[0, 1]
                for r in rs
                if r["flow_bytes"] is not None and len(r["x"]) > 2
            ]
            rows.append([f"{folder} {cell} {scheme}", str(k), f"{min(ns)}-{max(ns)}", fmt(np.mean(means) * 1e3, 1),
                         fmt(sd_it * 1e3, 1), " ".join(fmt(v, 2, True) for v in ac), fmt(r0, 2, True),
                         " ".join(fmt(se[b] * 1e3, 1) for b in (1, 2, 3, 4, 5)), fmt(between * 1e3, 1),
                         Fcol, fmt(np.mean(fb), 2, True) if fb else "-"])  # fmt: skip
    table("3. within a run (ms): iterations of the window, mean over workers per iteration",
          ["folder cell scheme", "runs", "n", "mean", "sd it", "acf lag 1..5 (pooled)", "lag1 rank0",
           "SE of run mean b=1..5", "sd of run means", f"F between/within b={B}",
           "r(it, flow bytes)"], rows)  # fmt: skip
    sl = [r["x"] for r in runs if r["scheme"] in (a.same, a.low)]
    nbar = np.mean([len(x) for x in sl])
    print(
        f"\nall {len(sl)} runs of {a.same}/{a.low}, pooled acf lag 1..5: "
        + " ".join(f"{pooled_acf(sl, k):+.2f}" for k in (1, 2, 3, 4, 5))
        + f" (iid: about {-1 / nbar:+.2f} each at n = {nbar:.0f}; 2 se {2 / math.sqrt(sum(len(x) for x in sl)):.2f})"
    )
    print(
        f"seed-to-seed variance of a run's mean over the variance its iterations give (b={B}), "
        "every scheme of a folder-cell pooled:"
    )
    for key, (ss, df, sw, k) in sorted(pool_F.items()):
        if df:
            print(
                f"  {key}: between {math.sqrt(ss / df) * 1e3:.1f} ms ({df} df), "
                f"within {math.sqrt(sw / k) * 1e3:.1f} ms, ratio {ss / df / (sw / k):.2f}"
            )

    # ------------------------------------------------------------ 4. decomposition
    table("4. variance of the paired change over the seeds (%^2) against the runs' iterations (two runs, independent)",
          ["folder cell", "s2 seeds", "within b=1", "b=2", "b=3", "b=4", "b=5", f"extra (b={B})",
           "share within", "F seeds/within"], rows_d)  # fmt: skip
    for base in [*bases, ""]:
        ks = [
            k
            for k in paired
            if not base or k[1] == base or k[1].startswith((base + "-x", base + "["))
        ]
        num = sum(
            (len(paired[k]["seeds"]) - 1) * paired[k]["sd"] ** 2 / paired[k]["w"][B] for k in ks
        )
        df1 = sum(len(paired[k]["seeds"]) - 1 for k in ks)
        df2 = sum(paired[k]["df_c"] for k in ks)
        if df1:
            r = num / df1
            lo, hi = r / f_q(0.975, df1, df2), r / f_q(0.025, df1, df2)
            print(
                f"  pooled {base or 'all'}: s2 seeds / within = {r:.2f} [95 %: {lo:.2f}, {hi:.2f}] on {df1} df "
                f"against {df2:.0f} (p {f_sf(r, df1, df2):.2f}; {len(ks)} folder-cells)"
            )

    rows = []
    for (folder, cell), by_scheme in sorted(groups.items()):
        seeds = sorted(
            set.intersection(*(set(v) for v in by_scheme.values())), key=lambda s: (len(s), s)
        )
        schemes = sorted(by_scheme)
        if len(seeds) < 2 or len(schemes) < 2:
            continue
        Y = np.array([[100 * math.log(by_scheme[sc][s]["mean"]) for s in seeds] for sc in schemes])
        ni, nj = Y.shape
        res = Y - Y.mean(1, keepdims=True) - Y.mean(0, keepdims=True) + Y.mean()
        ms_seed = ni * float(((Y.mean(0) - Y.mean()) ** 2).sum()) / (nj - 1)
        dfi = (ni - 1) * (nj - 1)
        ms_int = float((res**2).sum()) / dfi
        within = np.mean([1e4 * var_of_mean(by_scheme[sc][s]["x"], B)[0] / by_scheme[sc][s]["mean"] ** 2
                          for sc in schemes for s in seeds])  # fmt: skip
        rows.append([f"{folder} {cell}", f"{ni}x{nj}", fmt(ms_seed, 2), fmt(ms_int, 2), fmt(within, 2),
                     fmt(max(0.0, (ms_seed - ms_int) / ni), 2),
                     f"{ms_int / within:.2f}",
                     f"{ms_seed / ms_int:.2f} (p {f_sf(ms_seed / ms_int, nj - 1, dfi):.2f})"])  # fmt: skip
    table("4b. run means as 100 ln(mean), seed x scheme (schemes run on the same seeds), %^2",
          ["folder cell", "schemes x seeds", "MS seed", "MS seed x scheme", f"within (b={B})",
           "seed variance", "MS int/within", "MS seed/MS int"], rows)  # fmt: skip

    rows = []
    for base in bases:
        keys = [k for k in paired if k[1] == base or k[1].startswith(base + "-x")]
        if len(keys) < 2:
            continue
        seeds = sorted(
            set.intersection(*(set(paired[k]["seeds"]) for k in keys)), key=lambda s: (len(s), s)
        )
        if len(seeds) < 2:
            continue
        Y = np.array([[paired[k]["D"][paired[k]["seeds"].index(s)] for s in seeds] for k in keys])
        ni, nj = Y.shape
        res = Y - Y.mean(1, keepdims=True) - Y.mean(0, keepdims=True) + Y.mean()
        ms_seed = ni * float(((Y.mean(0) - Y.mean()) ** 2).sum()) / (nj - 1)
        ms_int = float((res**2).sum()) / ((ni - 1) * (nj - 1))
        wv = float(np.mean([paired[k]["w"][B] for k in keys]))
        dfw = sum(paired[k]["df_c"] for k in keys) / len(keys)
        rows.append([base, " / ".join(f"{k[0]} {k[1]}" for k in keys), " ".join(f"s{s}" for s in seeds),
                     "; ".join(" ".join(f"{v:+.1f}" for v in y) for y in Y),
                     fmt(ms_seed, 1), fmt(ms_int, 1), fmt(wv, 1),
                     f"{ms_seed / wv:.2f} (p {f_sf(ms_seed / wv, nj - 1, dfw):.2f})",
                     f"{ms_int / wv:.2f} (p {f_sf(ms_int / wv, (ni - 1) * (nj - 1), dfw):.2f})"])  # fmt: skip
    if rows:
        table(
            "4c. the same seeds (the same flows) in several folders: does a seed's D repeat? "
            "(%^2; F against the within-run variance of D)",
            [
                "cell",
                "folders",
                "seeds",
                "D by folder",
                "MS seed",
                "MS resid",
                "within",
                "F seed",
                "F resid",
            ],
            rows,
        )

    # ------------------------------------------------------------ 5. projections
    budgets = [float(v) for v in a.budgets.split(",")]
    targets = [float(v) for v in a.targets.split(",")]
    curves = {}
    for (folder, cell), p in sorted(paired.items()):
        if "[" in cell and not a.all:
            continue
        rs = [r for s in p["seeds"] for r in (p["S"][s], p["L"][s])]
        ts, T0, W0 = rs[0]["ts"], rs[0]["duration"], rs[0]["span"]
        over = float(np.median([r["over"] for r in rs]))
        s2, w = p["sd"] ** 2, p["w"][B]
        extra = max(0.0, s2 - w)
        nit, ext = p["n_it"], p["ext_ratio"]

        model = Design(over=over, ts=ts, T0=T0, W0=W0, extra=extra, w=w, nit=nit, ext=ext, b=B)
        cost = model.cost
        designs = {
            "a 12 s, n seeds": (12, lambda n, k, m=model: m.hw_seeds(n, 12, k)),
            "b 24 s, n seeds": (24, lambda n, k, m=model: m.hw_seeds(n, 24, k)),
            "b 48 s, n seeds": (48, lambda n, k, m=model: m.hw_seeds(n, 48, k)),
            "c 12 s, iterations": (12, lambda n, k, m=model: m.hw_iters(n, 12)),
            "c 48 s, iterations": (48, lambda n, k, m=model: m.hw_iters(n, 48)),
            "d 12 s, longer window": (12, lambda n, k, m=model: m.hw_seeds(n, 12, k, True)),
            "d 24 s, longer window": (24, lambda n, k, m=model: m.hw_seeds(n, 24, k, True)),
        }
        key = f"{folder} {cell}"
        curves[key] = {}
        prow = []
        for name, (T, fn) in designs.items():
            both = []
            for keep in (True, False):
                pts = [(cost(n, T), fn(n, keep), n) for n in range(1, 201)]
                curves[key][(name, keep)] = pts
                both.append(pts)
            cells = []
            for H in budgets:
                c = []
                for pts in both:
                    ok = [(h, n) for x, h, n in pts if x <= H + 1e-9 and np.isfinite(h)]
                    c.append(ok[-1] if ok else None)
                if c[0] is None:
                    cells.append("-")
                elif name.startswith("c") or abs(c[0][0] - c[1][0]) < 0.05:
                    cells.append(f"{c[0][0]:.1f} ({c[0][1]})")
                else:
                    cells.append(f"{c[0][0]:.1f}/{c[1][0]:.1f} ({c[0][1]})")
            for tg in targets:
                c = []
                for pts in both:
                    ok = [x for x, h, n in pts if h <= tg]
                    c.append(f"{ok[0]:.1f}" if ok else ">" + f"{pts[-1][0]:.0f}")
                cells.append(c[0] if name.startswith("c") or c[0] == c[1] else f"{c[0]}/{c[1]}")
            whole = "longer" in name
            v0 = w / model.ratio(T, whole)
            if name.startswith("c"):
                asym = f"{1.96 * math.sqrt(v0 * cost(1, T)):.1f}"
            else:
                asym = f"{1.96 * math.sqrt((extra + v0) * cost(1, T)):.1f}/{1.96 * math.sqrt(v0 * cost(1, T)):.1f}"
            prow.append([name, f"{cost(1, T):.2f}", *cells, asym])
        table(f"5. {key}: projected 95 % half-width, points of % (seeds); 'x/y' = extra kept / no extra. "
              f"overhead {over:.0f} s a run, K {ts:g}, s2 {s2:.1f}, within {w:.1f} (b={B}), extra {extra:.1f}, "
              f"{nit:.0f} iterations a run in the window, {nit * ext:.0f} with --extend {a.extend}",
              ["design", "h a pair", *(f"{H:g} h" for H in budgets), *(f"h to {t:g} pt" for t in targets),
               "hw x sqrt(h), many seeds"], prow)  # fmt: skip

    if a.plot and curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        keys = list(curves)
        cols = min(3, len(keys))
        rows_n = math.ceil(len(keys) / cols)
        fig, axes = plt.subplots(
            rows_n, cols, figsize=(4.6 * cols, 3.9 * rows_n), sharey=True, squeeze=False
        )
        shown = ["a 12 s, n seeds", "b 24 s, n seeds", "b 48 s, n seeds", "d 12 s, longer window",
                 "c 12 s, iterations", "c 48 s, iterations"]  # fmt: skip
        colors = dict(zip(shown, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
        for ax, key in zip(axes.flat, keys, strict=False):
            for (name, keep), pts in curves[key].items():
                if name not in shown or (name.startswith("c") and not keep):
                    continue
                xs = [x for x, h, n in pts if np.isfinite(h) and h < 100 and x <= a.xmax]
                hs = [h for x, h, n in pts if np.isfinite(h) and h < 100 and x <= a.xmax]
                label = name + (
                    "" if name.startswith("c") else " (extra kept)" if keep else " (no extra)"
                )
                ax.plot(
                    xs,
                    hs,
                    ":" if name.startswith("c") else "-" if keep else "--",
                    color=colors[name],
                    lw=1.4 if keep else 0.9,
                    marker="." if keep else None,
                    ms=3,
                    label=label,
                )
            p = paired[tuple(key.split(" ", 1))]
            ax.plot(
                [p["hours"]],
                [p["hw"]],
                "k*",
                ms=10,
                label=f"measured: {len(p['seeds'])} seeds of 12 s",
            )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(key, fontsize=9)
            ax.set_xlabel("machine hours (runs back to back)")
            ax.set_xlim(0.5, a.xmax)
            ax.set_ylim(0.3, 40)
            ax.grid(True, which="both", alpha=0.3)
        for ax in axes.flat[len(keys) :]:
            ax.axis("off")
        for ax in axes[:, 0]:
            ax.set_ylabel("95 % half-width, low vs same (points)")
        axes.flat[len(keys) - 1].legend(fontsize=6, loc="lower left")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
