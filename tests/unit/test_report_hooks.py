"""Every registered kind's report module keeps the contract of workloads/reporting.py: each of
ReportHooks' functions present with a signature its callers can use, and each optional part,
where a kind has it, as the Protocol says. A kind that drops or mis-signs one fails here, not
in the middle of a user's `testbed report`."""

from __future__ import annotations

import inspect
import types
from typing import Any

import pytest

from testbed.workloads import kinds
from testbed.workloads.registry import load
from testbed.workloads.reporting import OPTIONAL, ReportHooks

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _members(proto: type) -> list[str]:
    return [m for m in proto.__dict__ if not m.startswith("_")] + list(
        inspect.get_annotations(proto)
    )


def _norm(annotation: Any) -> str:
    return "".join(str(annotation).split())


def mismatch(impl: Any, proto: Any) -> str | None:
    """Why `impl` cannot stand where the protocol's function `proto` is called, or None."""
    if not callable(impl):
        return "not a function"
    want = list(inspect.signature(proto).parameters.values())[1:]  # without self
    sig = inspect.signature(impl)
    have = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in have):
        return None
    if len(have) < len(want) or any(p.kind not in POSITIONAL for p in have[: len(want)]):
        return (
            f"{sig} does not take the {len(want)} positional arguments {inspect.signature(proto)}"
        )
    extra = [p.name for p in have[len(want) :] if p.default is inspect.Parameter.empty]
    if extra and all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in have):
        return f"{sig}: {', '.join(extra)} must have defaults"
    for w, h in zip(want, have, strict=False):
        if h.annotation not in (h.empty, "Any") and _norm(h.annotation) != _norm(w.annotation):
            return f"{h.name}: {h.annotation}, the protocol says {w.annotation}"
    ret, proto_ret = sig.return_annotation, inspect.signature(proto).return_annotation
    if ret is not sig.empty and _norm(ret) != _norm(proto_ret):
        return f"returns {ret}, the protocol says {proto_ret}"
    return None


def problems(mod: types.ModuleType | Any) -> list[str]:
    out = []
    for name in _members(ReportHooks):
        if not hasattr(mod, name):
            out.append(f"{name}: missing")
        elif why := mismatch(getattr(mod, name), getattr(ReportHooks, name)):
            out.append(f"{name}: {why}")
    for proto in OPTIONAL:
        for name in _members(proto):
            if not hasattr(mod, name):
                continue
            if name in inspect.get_annotations(proto):
                value = getattr(mod, name)
                if not (isinstance(value, tuple) and all(isinstance(c, str) for c in value)):
                    out.append(f"{name}: {value!r} is not a tuple of names")
            elif why := mismatch(getattr(mod, name), getattr(proto, name)):
                out.append(f"{name}: {why}")
    return out


REPORTED = [n for n in kinds.names() if kinds.get(n).report is not None]


def test_the_kinds_are_found():
    assert len(REPORTED) >= 5, REPORTED  # the built-in kinds: linkcheck, training's, ...


@pytest.mark.parametrize("kind", REPORTED)
def test_the_report_module_keeps_the_contract(kind):
    mod = load(kinds.get(kind).report or "")
    assert problems(mod) == []
    assert isinstance(mod, ReportHooks)


def test_the_check_finds_a_missing_or_mis_signed_function():
    """So that the test above can fail: a module with one function gone, one taking too few
    arguments, one with a required extra, one with another return type and a bad COLUMNS."""
    good = load(kinds.get("incast").report or "")
    fake = types.ModuleType("fake")
    fake.__dict__.update({n: getattr(good, n) for n in _members(ReportHooks)})
    del fake.describe
    fake.counts = lambda name: {}
    fake.plots = lambda run, name, section, out_dir, dpi: []

    def key_metrics(name: str, section: dict[str, Any]) -> list[str]:
        return []

    fake.key_metrics = key_metrics
    fake.COLUMNS = ["a"]
    found = problems(fake)
    assert [p.split(":")[0] for p in found] == [
        "describe", "key_metrics", "counts", "plots", "COLUMNS",
    ], found  # fmt: skip
    assert not isinstance(fake, ReportHooks)
