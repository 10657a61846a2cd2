"""Queueing profiles: which DSCP values go to which class, and in what priority order.

A profile is YAML in `tc_profiles/` (or inline in a scenario). Classes are listed from the
highest priority to the lowest; the scheduler serves a lower class only when every higher one
is empty (strict priority). Each class has a bounded FIFO. Exactly one class is the default and
takes everything no DSCP rule matches (including non-IP frames such as ARP, which is why the
shipped profiles make a *high* class the default: control traffic must never starve behind a
backlogged low class).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

# RFC 2474/2597/3246/8622 code points by name.
DSCP_NAMES: dict[str, int] = {
    "BE": 0,
    "DF": 0,
    "CS0": 0,
    "LE": 1,
    **{f"CS{i}": 8 * i for i in range(1, 8)},
    **{f"AF{x}{y}": 8 * x + 2 * y for x in range(1, 5) for y in range(1, 4)},
    "VA": 44,
    "EF": 46,
}


def parse_dscp(value: Any) -> int:
    """A DSCP by number (0–63) or name (EF, AF41, CS1, ...)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a DSCP number or name, got {value!r}")
    if isinstance(value, int):
        if not 0 <= value <= 63:
            raise ValueError(f"DSCP must be 0–63, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip().upper()
        if text.isdigit():
            return parse_dscp(int(text))
        if text in DSCP_NAMES:
            return DSCP_NAMES[text]
        raise ValueError(
            f"unknown DSCP name {value!r}; use 0–63 or one of EF, AF11–AF43, CS0–CS7, LE"
        )
    raise ValueError(f"expected a DSCP number or name, got {value!r}")


Dscp = Annotated[int, BeforeValidator(parse_dscp)]


class TrafficClass(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$", max_length=32)
    dscp: list[Dscp] = Field(
        default_factory=list,
        description="DSCP values classified into this class (numbers or names such as EF, CS1)",
    )
    limit: int = Field(1000, ge=1, le=1_000_000, description="FIFO length in packets")
    guaranteed: float = Field(
        0.01,
        ge=0,
        le=1,
        description="share of the link this class always gets (HTB rate); the rest goes by "
        "priority. 0: none, strict priority as pfifo_fast's bands (but for 8 kbit/s, the least "
        "rate the plan gives a class)",
    )

    @property
    def mark(self) -> int:
        """The DSCP a workload uses to land in this class."""
        return self.dscp[0] if self.dscp else 0


# HTB has 8 priorities, 0 (highest) to 7; the kernel clamps a higher `prio` to 7, which would
# make the 8th and every later class round-robin peers instead of strictly ordered ones. The
# plan gives the i-th class (from 0) prio i, so a profile has at most 8 classes.
HTB_PRIORITIES = 8


class TcProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    description: str = ""
    classes: list[TrafficClass] = Field(
        min_length=1,
        max_length=HTB_PRIORITIES,
        description="from the highest priority to the lowest; at most 8 (HTB priorities 0–7)",
    )
    default: str | None = Field(
        None, description="class for traffic no DSCP rule matches; the first class if unset"
    )
    shared_limit: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="packets a port's classes hold together: an arriving packet is dropped "
        "when they hold this many, whatever its class (ns-3's PfifoFastQueueDisc, the "
        "thesis' port); the classes then take no limit of their own. Exact links only",
    )
    host_limit: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="packets each class holds at a host's own port (the host's side of its "
        "link, what it sends), instead of its limit or shared_limit there; switch ports keep "
        "those (the thesis' simulator: 100 a band at its servers, 1000 shared at its ToR)",
    )

    @field_validator("classes", mode="before")
    @classmethod
    def _eight_priorities(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) > HTB_PRIORITIES:
            raise ValueError(
                f"{len(value)} classes, but HTB has only {HTB_PRIORITIES} priorities (0–7), so "
                f"the {HTB_PRIORITIES}th class and every later one would share priority 7 "
                f"round-robin instead of strict priority; use at most {HTB_PRIORITIES} classes "
                "(one class can take several DSCP values)"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TcProfile:
        names = [c.name for c in self.classes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"class names must be unique, {sorted(dup)} repeat")
        if self.default is None:
            self.default = names[0]
        elif self.default not in names:
            raise ValueError(f"default: {self.default!r} is not a class; classes are {names}")
        seen: dict[int, str] = {}
        for cls in self.classes:
            for d in cls.dscp:
                if d in seen and seen[d] != cls.name:
                    raise ValueError(f"DSCP {d} is in both {seen[d]!r} and {cls.name!r}")
                seen[d] = cls.name
            if not cls.dscp and cls.name != self.default:
                raise ValueError(
                    f"class {cls.name!r} has no dscp values and is not the default, "
                    "so no traffic could reach it"
                )
        if self.shared_limit is not None:
            # a dumped profile gives the default again: only another value is the class's own
            default = TrafficClass.model_fields["limit"].default
            own = [c.name for c in self.classes if c.limit != default]
            if own:
                raise ValueError(
                    f"shared_limit: the classes share it, so {own[0]!r} takes no limit of its "
                    "own; remove the classes' limits (or shared_limit)"
                )
            if self.shared_limit < len(self.classes):
                raise ValueError(
                    f"shared_limit: {self.shared_limit} is below the {len(self.classes)} "
                    "classes it is shared by; give at least one packet per class"
                )
        if sum(c.guaranteed for c in self.classes) > 1.0 + 1e-9:
            raise ValueError("the classes' guaranteed shares add up to more than 1")
        return self

    def cls(self, name: str) -> TrafficClass:
        for c in self.classes:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.classes]

    def unknown_class(self, name: str) -> str | None:
        """What is wrong with naming class `name` of this profile, or None (a field's error)."""
        if name in self.class_names:
            return None
        return f"{name!r} is not a class of tc profile {self.name!r}; classes: {self.class_names}"

    def class_of(self, dscp: int) -> str:
        for c in self.classes:
            if dscp in c.dscp:
                return c.name
        assert self.default is not None
        return self.default


def profiles_dir() -> Path:
    """The shipped profiles: `testbed/tc_profiles/`, package data, so that an installed (not
    editable) testbed has them too."""
    return Path(__file__).resolve().parents[1] / "tc_profiles"


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def find_profile(ref: str, base_dir: Path | None) -> Path:
    """Resolve a profile reference: a path to a YAML file, or a name in the scenario's own
    tc_profiles/ folder or the shipped ones."""
    candidates: list[Path] = []
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        candidates.append(p if p.is_absolute() else (base_dir or Path.cwd()) / p)
    else:
        if base_dir is not None:
            candidates.append(base_dir / "tc_profiles" / f"{ref}.yaml")
        candidates.append(profiles_dir() / f"{ref}.yaml")
    for c in candidates:
        if c.is_file():
            return c
    raise ValueError(
        f"no tc profile {ref!r}; shipped profiles: {', '.join(shipped_profiles())} "
        "(or give a path to a YAML file, or the profile inline)"
    )


def load_profile_data(ref: str, base_dir: Path | None) -> dict[str, Any]:
    path = find_profile(ref, base_dir)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"tc profile {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"tc profile {path} must be a mapping")
    return data
