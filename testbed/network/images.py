"""The docker runtime's node image, built on this machine without a registry.

No registry is assumed reachable, so nothing is pulled: the base is a Debian root file system
made with debootstrap and imported, and every Python package goes in as a wheel made (or
found) on the host, installed in a build with no network. The tag is a hash of what went in
(Dockerfile, base, wheels, testbed's source), so an image is built only when one of them
changed, and a change in testbed's source rebuilds only the image's last layer.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import docker
import docker.errors
import requests
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from testbed.core.errors import EnvironmentProblem

NODE_PYTHON = "/opt/testbed/venv/bin/python"
"""The interpreter of the node image: its venv holds testbed, torch and Horovod."""

NODE_REPO = "testbed-node"
BASE_REPO = "testbed-base"
LABEL = "testbed.image"  # "node" or "base"
LABEL_HASH = "testbed.hash"

SOURCE_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = SOURCE_ROOT / "images" / "node.Dockerfile"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"  # TESTBED_DEBIAN_MIRROR overrides
# Everything apt would install goes in here, so the docker build needs no network.
# iptables: the training kinds' DSCP rule, in a swarm point's run (testbed/results/swarm/image.py)
DEBIAN_PACKAGES = (
    "python3", "python3-venv", "iproute2", "iputils-ping", "procps", "iperf3", "iptables",
)  # fmt: skip
# Files left out of the imported root (directories stay, so apt and dpkg still find theirs):
# downloaded packages and lists, logs, docs but their copyrights, man pages, translations.
ROOTFS_EXCLUDE = (
    "var/cache/apt/*.bin",
    "var/cache/apt/archives/*.deb",
    "var/lib/apt/lists/*_*",
    "var/log/*",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
)
ROOTFS_KEEP = ("usr/share/doc/*/copyright",)
ROOTFS_MOUNTS = ("dev", "proc", "sys")  # the engine provides their contents
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    f"LABEL {LABEL}=base",
    'CMD ["/bin/bash"]',
)
# Bump when the way an image is put together changes in a way the hashed inputs do not show.
RECIPE = 1

Progress = Callable[[str], None]
_PIP_WHEEL = (
    sys.executable,
    "-m",
    "pip",
    "wheel",
    "-q",
    "--disable-pip-version-check",
    "--no-deps",
)


@dataclass(frozen=True)
class BuildResult:
    """What `build_images` did: `built` is False when the tagged image was already there."""

    tag: str
    size_mb: float
    seconds: float
    built: bool


# --- where things are -----------------------------------------------------------------------


def _xdg_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def cache_dir() -> Path:
    """Dependency wheels, build contexts and logs (TESTBED_IMAGE_CACHE overrides)."""
    return Path(os.environ.get("TESTBED_IMAGE_CACHE") or _xdg_cache() / "testbed" / "images")


def _py_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def _host_dist(name: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise EnvironmentProblem(
            f"{name} is not installed in {sys.prefix}, so the node image cannot match it: "
            "run bash install.sh"
        ) from None


def horovod_wheel_dir() -> Path:
    """Where install.sh caches the Horovod wheel it patches and builds (one per torch)."""
    root = os.environ.get("TESTBED_WHEEL_CACHE") or _xdg_cache() / "testbed" / "wheels"
    torch = _host_dist("torch").version.split("+")[0]
    return Path(root) / f"torch-{torch}-{_py_tag()}"


# --- what goes in ---------------------------------------------------------------------------


def _project_dependencies(root: Path) -> list[str]:
    import tomllib

    with open(root / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"].get("dependencies", []))


def pins(root: Path | None = None) -> dict[str, str]:
    """Every distribution the node's venv needs, at the version this host's venv has: testbed's
    dependencies (from pyproject.toml), torch and Horovod, and everything they require. The
    node runs the same code as the host, and the set is known without asking an index."""
    root = root or SOURCE_ROOT
    todo = [Requirement(r) for r in _project_dependencies(root)]
    todo += [Requirement("torch"), Requirement("horovod")]
    found: dict[str, str] = {}
    requires: dict[str, list[str]] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req = todo.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if name not in found:
            md = _host_dist(req.name).metadata  # parsed once: the slow part
            found[name], requires[name] = md["Version"], md.get_all("Requires-Dist") or []
        if not req.specifier.contains(found[name], prereleases=True):
            raise EnvironmentProblem(
                f"{req.name} {found[name]} is installed in {sys.prefix}, but {req} is needed: "
                "run bash install.sh"
            )
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for r in requires[name]:
            if not extras and "extra" in r.partition(";")[2]:
                continue  # an optional dependency (parsing them all costs 0.1 s)
            child = Requirement(r)
            if child.marker is None or any(
                child.marker.evaluate({"extra": e}) for e in (*extras, "")
            ):
                todo.append(child)
    found.pop("testbed", None)
    return dict(sorted(found.items()))


@functools.cache
def _tag_rank() -> dict[str, int]:
    return {str(t): i for i, t in enumerate(sys_tags())}


def _wheels_in(d: Path) -> dict[tuple[str, Version], Path]:
    """The wheels in d that install here, by (name, version); the best-suited one of each."""
    rank = _tag_rank()
    best: dict[tuple[str, Version], tuple[int, Path]] = {}
    for p in d.glob("*.whl") if d.is_dir() else ():
        try:
            name, version, _, tags = parse_wheel_filename(p.name)
        except ValueError:
            continue
        score = min((rank[str(t)] for t in tags if str(t) in rank), default=None)
        key = (name, version)
        if score is not None and (key not in best or score < best[key][0]):
            best[key] = (score, p)
    return {k: p for k, (_, p) in best.items()}


def wheel_files(fetch: bool = True, progress: Progress = print) -> list[Path]:
    """The wheels of `pins()`: Horovod from install.sh's cache, the rest from the image
    cache, where missing ones are made once with `pip wheel` (the host's pip configuration
    decides where from). With fetch=False a missing wheel is an error."""
    cache, hvd_dir = cache_dir() / "wheels", horovod_wheel_dir()
    have, hvd = _wheels_in(cache), _wheels_in(hvd_dir)
    out: list[Path] = []
    missing: list[str] = []
    for name, version in pins().items():
        key = (name, Version(version))
        if name == "horovod":
            if key not in hvd:
                raise EnvironmentProblem(
                    f"the Horovod {version} wheel is not in {hvd_dir}: run bash install.sh, "
                    "which builds it once (or set TESTBED_WHEEL_CACHE to where it is)"
                )
            out.append(hvd[key])
        elif key in have:
            out.append(have[key])
        else:
            missing.append(f"{name}=={version}")
    if missing and not fetch:
        raise EnvironmentProblem(
            f"the node image is not built (its wheels, e.g. {missing[0]}, are not cached in "
            f"{cache}): run `testbed images build`"
        )
    if missing:
        progress(f"fetching {len(missing)} wheels for the node image into {cache} (once)")
        cache.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            [*_PIP_WHEEL, "-w", str(cache), *missing], capture_output=True, text=True
        )
        lines = (r.stderr or r.stdout).strip().splitlines()
        have = _wheels_in(cache)
        for req in missing:
            name, version = req.split("==", 1)
            if (name, Version(version)) not in have:
                raise EnvironmentProblem(
                    f"pip could not make a wheel of {req} for the node image "
                    f"({lines[-1] if lines else 'no output'}); put one in {cache}, or point "
                    "pip at an index that has it (e.g. PIP_EXTRA_INDEX_URL)"
                )
            out.append(have[(name, Version(version))])
    return sorted(out, key=lambda p: p.name)


def file_sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_sha256(p: Path) -> str:
    """sha256 of a wheel, remembered by path, size, mtime and inode (torch's is 190 MB:
    hashing it on every `testbed up` would cost half a second)."""
    book = cache_dir() / "sha256.json"
    try:
        known = json.loads(book.read_text())
    except (OSError, ValueError):
        known = {}
    st = p.stat()
    key, stamp = str(p.resolve()), [st.st_size, st.st_mtime_ns, st.st_ino]
    if key in known and known[key][:3] == stamp:
        return str(known[key][3])
    digest = file_sha256(p)
    known[key] = [*stamp, digest]
    with contextlib.suppress(OSError):
        book.parent.mkdir(parents=True, exist_ok=True)
        tmp = book.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=0, sort_keys=True))
        tmp.replace(book)
    return digest


def _source_files(root: Path) -> list[Path]:
    """The files a testbed wheel is made of: the package (without bytecode) and pyproject."""
    files = [
        p
        for p in (root / "testbed").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    ]
    return [*sorted(files), root / "pyproject.toml"]


def source_digest(root: Path | None = None) -> str:
    """A hash of testbed's source. Not the wheel's: wheel builds are not byte-reproducible."""
    root = root or SOURCE_ROOT
    h = hashlib.sha256()
    for p in _source_files(root):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def base_tag() -> str:
    """testbed's own base image: its tag is a hash of the debootstrap recipe."""
    recipe = {
        "suite": DEBIAN_SUITE,
        "variant": "minbase",
        "packages": sorted(DEBIAN_PACKAGES),
        "exclude": [ROOTFS_EXCLUDE, ROOTFS_KEEP, ROOTFS_MOUNTS],
        "changes": list(BASE_CHANGES),
        "recipe": RECIPE,
    }
    return f"{BASE_REPO}:{DEBIAN_SUITE}-{_digest(recipe)[:12]}"


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def tag_for(dockerfile_text: str, base: str, wheels: list[tuple[str, str]], source: str) -> str:
    """The node image's tag from everything that goes in: wheels as (file name, sha256)."""
    inputs = {
        "dockerfile": dockerfile_text,
        "base": base,
        "wheels": sorted(wheels),
        "testbed": source,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "recipe": RECIPE,
    }
    return f"{NODE_REPO}:{_digest(inputs)[:12]}"


@dataclass(frozen=True)
class _Plan:
    tag: str
    base: str
    wheels: list[Path]
    dockerfile_text: str


def _plan(base: str | None, fetch: bool, progress: Progress) -> _Plan:
    try:
        text = DOCKERFILE.read_text()
    except OSError:
        raise EnvironmentProblem(
            f"{DOCKERFILE} is missing: the node image is built from a testbed source checkout"
        ) from None
    base_ref = base or base_tag()
    wheels = wheel_files(fetch=fetch, progress=progress)
    tag = tag_for(
        text, base_ref, [(p.name, wheel_sha256(p)) for p in wheels], source_digest(SOURCE_ROOT)
    )
    return _Plan(tag, base_ref, wheels, text)


def node_tag(*, base: str | None = None) -> str:
    """The tag `ensure_node_image` would return. Cheap once the wheels are cached (hashes are
    remembered); the first call fetches missing dependency wheels."""
    return _plan(base, fetch=True, progress=lambda _: None).tag


# --- the engine ----------------------------------------------------------------------------


def _image(client: docker.DockerClient, ref: str) -> docker.models.images.Image | None:
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except (docker.errors.DockerException, OSError) as e:
        raise _engine_problem(e) from None


def _engine_problem(e: BaseException) -> EnvironmentProblem:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return EnvironmentProblem(
        f"the Docker engine does not answer ({first}): run bash install.sh, which starts "
        "dockerd (its log: /var/log/testbed/dockerd.log)"
    )


@contextlib.contextmanager
def _long_timeout(client: docker.DockerClient, seconds: int = 3600) -> Iterator[None]:
    """Builds and imports stay silent for minutes (pip installing torch); the SDK's default
    60 s read timeout would cut them off."""
    api = client.api
    old = api.timeout
    api.timeout = seconds
    try:
        yield
    finally:
        api.timeout = old


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time on this machine (two `testbed up` starting together)."""
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_node_image(
    client: docker.DockerClient,
    *,
    build: bool = True,
    base: str | None = None,
    progress: Callable[[str], None] = print,
) -> str:
    """The node image's tag, building it first when it is missing and build is True."""
    if not build:
        plan = _plan(base, fetch=False, progress=progress)
        if _image(client, plan.tag) is None:
            raise EnvironmentProblem(
                f"the node image {plan.tag} is not built: run `testbed images build` (about "
                "4 minutes the first time, seconds after a change in testbed's source)"
            )
        return plan.tag
    r = build_images(client, base=base, progress=progress)
    if r.built:
        progress(f"node image {r.tag} built in {r.seconds:.0f} s ({r.size_mb:.0f} MB)")
    return r.tag


def build_images(
    client: docker.DockerClient,
    *,
    base: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] = print,
) -> BuildResult:
    """Build testbed's base image (unless `base` names another) and the node image, each only
    when its tag is missing. force builds both again, without Docker's layer cache: for fresh
    Debian packages, or after a base with the same name changed."""
    t0 = time.monotonic()
    plan = _plan(base, fetch=True, progress=progress)
    image = None if force else _image(client, plan.tag)
    if image is None:
        with _build_lock():
            image = None if force else _image(client, plan.tag)  # built meanwhile?
            if image is None:
                if base is None and (force or _image(client, plan.base) is None):
                    _build_base(client, plan.base, progress)
                _build_node(client, plan, progress, nocache=force)
                image = _image(client, plan.tag)
                if image is None:
                    raise EnvironmentProblem(f"docker built {plan.tag} but does not list it")
                return BuildResult(
                    plan.tag, image.attrs["Size"] / 1e6, time.monotonic() - t0, built=True
                )
    return BuildResult(plan.tag, image.attrs["Size"] / 1e6, time.monotonic() - t0, built=False)


# --- base image: debootstrap, then import ---------------------------------------------------


def _build_base(client: docker.DockerClient, tag: str, progress: Progress) -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "building the base image runs debootstrap, which needs root: run as root, or "
            "give a base image that has python3, venv and iproute2 (--base python:3.11-slim)"
        )
    if shutil.which("debootstrap") is None:
        raise EnvironmentProblem(
            "debootstrap is missing (it makes the node image's Debian base): run bash "
            "install.sh, or apt-get install debootstrap"
        )
    mirror = os.environ.get("TESTBED_DEBIAN_MIRROR") or DEBIAN_MIRROR
    progress(f"building base image {tag} from debootstrap ({DEBIAN_SUITE}; once, ~2 min)")
    cache = cache_dir()
    (cache / "logs").mkdir(parents=True, exist_ok=True)
    log = cache / "logs" / f"debootstrap-{tag.split(':')[1]}.log"
    rootfs = cache / f"rootfs-{tag.split(':')[1]}"
    _remove_tree(rootfs)
    try:
        with open(log, "w") as f:
            r = subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(DEBIAN_PACKAGES)}",
                    DEBIAN_SUITE,
                    str(rootfs),
                    mirror,
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if r.returncode != 0:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            raise EnvironmentProblem(
                f"debootstrap failed ({tail[-1][:160] if tail else f'exit {r.returncode}'}); "
                f"its log is {log} (is {mirror} reachable? TESTBED_DEBIAN_MIRROR sets another)"
            )
        progress(f"importing the root file system as {tag}")
        with _long_timeout(client):
            try:
                out = client.api.import_image(
                    src=_tar_stream(rootfs),
                    stream_src=True,
                    repository=tag.split(":")[0],
                    tag=tag.split(":")[1],
                    changes=list(BASE_CHANGES),
                )
            except (docker.errors.DockerException, OSError) as e:
                raise _engine_problem(e) from None
        errors = re.findall(r'"error"\s*:\s*"([^"]*)"', str(out))
        if errors or _image(client, tag) is None:
            raise EnvironmentProblem(
                f"docker import of the base image failed: {errors[0] if errors else out!s:.200}"
            )
    finally:
        _remove_tree(rootfs)


def _skip(rel: str, is_dir: bool) -> bool:
    """Whether a path of the debootstrap root (relative, '/'-separated) stays out of the tar."""
    top, _, below = rel.partition("/")
    if top in ROOTFS_MOUNTS:
        return bool(below)
    if is_dir:
        return False
    match = functools.partial(fnmatch.fnmatchcase, rel)
    return any(map(match, ROOTFS_EXCLUDE)) and not any(map(match, ROOTFS_KEEP))


def _walk(d: Path, rel: str = "") -> Iterator[tuple[Path, str]]:
    """(path, name in the tar) of everything under d that goes into the image, parents first."""
    with os.scandir(d) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        r = f"{rel}{e.name}"
        is_dir = e.is_dir(follow_symlinks=False)
        if _skip(r, is_dir):
            continue
        yield Path(e.path), r
        if is_dir:
            yield from _walk(Path(e.path), r + "/")


class _Sink:
    """A write-only file that tarfile streams into; the generator below takes its bytes."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def write(self, b: bytes) -> int:
        self.parts.append(bytes(b))
        self.size += len(b)
        return len(b)

    def take(self) -> bytes:
        out, self.parts, self.size = b"".join(self.parts), [], 0
        return out


def _tar_stream(root: Path) -> Iterator[bytes]:
    """The root file system as a tar stream in ~1 MB chunks (no temporary tar file), with
    file capabilities (ping's cap_net_raw) as SCHILY.xattr records, which the engine applies."""
    sink = _Sink()
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for path, rel in _walk(root):
            ti = tar.gettarinfo(str(path), arcname=rel)
            if ti is None:  # a socket
                continue
            ti.uname = ti.gname = ""
            with contextlib.suppress(OSError):
                for name in os.listxattr(path, follow_symlinks=False):
                    if name.startswith("security."):
                        value = os.getxattr(path, name, follow_symlinks=False)
                        # tarfile writes non-UTF-8 values back as the original bytes
                        ti.pax_headers[f"SCHILY.xattr.{name}"] = value.decode(
                            "utf-8", "surrogateescape"
                        )
            if ti.isreg():
                with open(path, "rb") as f:
                    tar.addfile(ti, f)
            else:
                tar.addfile(ti)
            if sink.size >= 1 << 20:
                yield sink.take()
    yield sink.take()


def _remove_tree(path: Path) -> None:
    """Remove a debootstrap root. debootstrap mounts /proc and /sys in it and unmounts them on
    exit; a killed one leaves them, and deleting through a live /proc or /dev is no option."""
    if not path.exists():
        return
    prefix = str(path.resolve())
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == prefix or mp.startswith(prefix + "/"):
                mounts.append(mp)
    for mp in sorted(mounts, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True)
    with open("/proc/self/mountinfo") as f:
        left = [ln.split()[4] for ln in f if ln.split()[4].startswith(prefix)]
    if left:
        raise EnvironmentProblem(f"{left[0]} is still mounted; unmount it, then remove {path}")
    shutil.rmtree(path)


# --- node image: context, then build ------------------------------------------------------


def _build_testbed_wheel(dst: Path) -> Path:
    """`pip wheel` of a copy of the source: an in-tree build would leave build/ and
    *.egg-info in the checkout."""
    with tempfile.TemporaryDirectory(prefix="testbed-src-") as tmp:
        src = Path(tmp)
        shutil.copytree(
            SOURCE_ROOT / "testbed",
            src / "testbed",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"),
        )
        for name in ("pyproject.toml", "README.md"):
            if (SOURCE_ROOT / name).exists():
                shutil.copy2(SOURCE_ROOT / name, src / name)
        r = subprocess.run(
            [*_PIP_WHEEL, "--no-build-isolation", "--no-index", "-w", str(dst), str(src)],
            capture_output=True,
            text=True,
        )
        wheels = sorted(dst.glob("testbed-*.whl"))
        if r.returncode != 0 or not wheels:
            lines = (r.stderr or r.stdout).strip().splitlines()
            raise EnvironmentProblem(
                f"pip could not build testbed's wheel: {lines[-1] if lines else r.returncode} "
                "(setuptools in this venv? run bash install.sh)"
            )
        return wheels[0]


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _context(plan: _Plan, ctx: Path) -> None:
    """Dockerfile, wheels/ with requirements.txt (every pin, so pip installs exactly these),
    and testbed/ with the testbed wheel. Wheels are hard links into the caches."""
    (ctx / "wheels").mkdir(parents=True)
    (ctx / "testbed").mkdir()
    (ctx / "Dockerfile").write_text(plan.dockerfile_text)
    for p in plan.wheels:
        _link_or_copy(p, ctx / "wheels" / p.name)
    reqs = [
        f"{parse_wheel_filename(p.name)[0]}=={parse_wheel_filename(p.name)[1]}" for p in plan.wheels
    ]
    (ctx / "wheels" / "requirements.txt").write_text("\n".join(reqs) + "\n")
    _build_testbed_wheel(ctx / "testbed")


def _build_node(
    client: docker.DockerClient, plan: _Plan, progress: Progress, nocache: bool = False
) -> None:
    h = plan.tag.split(":")[1]
    cache = cache_dir()
    (cache / "logs").mkdir(parents=True, exist_ok=True)
    ctx, log = cache / f"context-{h}", cache / "logs" / f"build-{h}.log"
    shutil.rmtree(ctx, ignore_errors=True)
    progress(
        f"building node image {plan.tag} on {plan.base} (~1.5 min with new wheels; "
        "seconds after a change in testbed's source)"
    )
    try:
        _context(plan, ctx)
        error, said = None, ""
        with _long_timeout(client), open(log, "w") as f:
            stream = client.api.build(
                path=str(ctx),
                tag=plan.tag,
                buildargs={
                    "BASE": plan.base,
                    "PYTHON_VERSION": f"{sys.version_info[0]}.{sys.version_info[1]}",
                },
                labels={LABEL_HASH: h},  # testbed.image=node: in the Dockerfile
                network_mode="none",
                rm=True,
                forcerm=True,
                pull=False,
                nocache=nocache,
                decode=True,
            )
            for chunk in stream:
                text = re.sub(r"\x1b\[[0-9;]*m", "", chunk.get("stream", ""))  # stderr's colour
                f.write(text)
                m = re.match(r"Step (\d+/\d+) : ((?:RUN|COPY) .*)", text)
                if m:  # the steps that take time (or come from the cache)
                    step = m.group(2).strip()
                    progress(f"  step {m.group(1)}: {step[:70]}{'…' if len(step) > 70 else ''}")
                elif text.strip() and not text.startswith((" ---> ", "Removing intermediate")):
                    said = text.strip().splitlines()[-1]  # what a failing command said last
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                    f.write(f"ERROR: {error}\n")
        if error:
            why = said if said and "returned a non-zero code" in error else error
            raise EnvironmentProblem(
                f"docker build of {plan.tag} failed: {why.splitlines()[-1][:200]} "
                f"(the build log is {log})"
            )
    except docker.errors.APIError as e:
        raise EnvironmentProblem(
            f"docker build of {plan.tag} failed: {e.explanation or e} (the build log is {log})"
        ) from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise _engine_problem(e) from None
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
