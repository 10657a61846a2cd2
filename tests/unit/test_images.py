"""The node image's tag, wheel selection and base-image tar, on fake inputs (no engine)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import tarfile
from pathlib import Path

import docker.errors
import pytest

from testbed.core.errors import EnvironmentProblem
from testbed.network import images

pytestmark = pytest.mark.unit
# vfs_cap_data revision 2, effective, permitted = cap_net_raw (bit 13): ping's capability
CAP_NET_RAW = bytes.fromhex("0100000200200000000000000000000000000000")


def _write(p: Path, text: str | bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source tree, a Dockerfile and two wheels in tmp_path; node_tag looks only there."""
    src = tmp_path / "src"
    _write(src / "testbed" / "__init__.py", '__version__ = "0.1.0"\n')
    _write(src / "testbed" / "workloads" / "node.py", "print('hi')\n")
    _write(src / "pyproject.toml", '[project]\nname = "testbed"\ndependencies = []\n')
    _write(src / "images" / "node.Dockerfile", "ARG BASE\nFROM ${BASE}\n")
    wheels = tmp_path / "wheels"
    _write(wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", b"torch bytes")
    _write(wheels / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl", b"horovod bytes")
    monkeypatch.setattr(images, "SOURCE_ROOT", src)
    monkeypatch.setattr(images, "DOCKERFILE", src / "images" / "node.Dockerfile")
    monkeypatch.setattr(
        images, "wheel_files", lambda fetch=True, progress=print: sorted(wheels.glob("*.whl"))
    )
    monkeypatch.setenv("TESTBED_IMAGE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_tag_is_stable_for_the_same_inputs(fake: Path):
    tag = images.node_tag()
    assert tag == images.node_tag()
    name, _, h = tag.partition(":")
    assert name == "testbed-node" and len(h) == 12 and int(h, 16) >= 0


def test_tag_changes_with_the_dockerfile(fake: Path):
    before = images.node_tag()
    _write(images.DOCKERFILE, "ARG BASE\nFROM ${BASE}\nRUN true\n")
    assert images.node_tag() != before


def test_tag_changes_with_a_wheel(fake: Path):
    before = images.node_tag()
    _write(fake / "wheels" / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", b"other bytes!")
    changed = images.node_tag()
    assert changed != before
    _write(fake / "wheels" / "numpy-2.4.6-cp311-cp311-linux_x86_64.whl", b"numpy")
    assert images.node_tag() not in (before, changed)


def test_tag_changes_with_testbed_source_but_not_bytecode(fake: Path):
    before = images.node_tag()
    _write(fake / "src" / "testbed" / "__pycache__" / "node.cpython-311.pyc", b"\0\0")
    _write(fake / "src" / "README.md", "docs are not in the tag\n")
    assert images.node_tag() == before
    _write(fake / "src" / "testbed" / "workloads" / "node.py", "print('hello')\n")
    edited = images.node_tag()
    assert edited != before
    _write(fake / "src" / "testbed" / "workloads" / "new.py", "")
    added = images.node_tag()
    assert added not in (before, edited)
    _write(fake / "src" / "pyproject.toml", '[project]\nname = "testbed"\ndependencies = ["x"]\n')
    assert images.node_tag() not in (before, edited, added)


def test_tag_changes_with_the_base(fake: Path):
    assert images.node_tag() != images.node_tag(base="python:3.11-slim-bookworm")
    assert images.node_tag(base="a:1") != images.node_tag(base="a:2")


def test_base_tag_is_a_hash_of_the_recipe(monkeypatch: pytest.MonkeyPatch):
    tag = images.base_tag()
    assert tag.startswith("testbed-base:bookworm-") and tag == images.base_tag()
    monkeypatch.setattr(images, "DEBIAN_PACKAGES", (*images.DEBIAN_PACKAGES, "tcpdump"))
    assert images.base_tag() != tag


def test_wheel_hashes_are_remembered_and_renewed(fake: Path):
    w = fake / "wheels" / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    assert images.wheel_sha256(w) == hashlib.sha256(b"horovod bytes").hexdigest()
    assert (fake / "cache" / "sha256.json").exists()
    assert images.wheel_sha256(w) == hashlib.sha256(b"horovod bytes").hexdigest()
    _write(w, b"rebuilt horovod")
    assert images.wheel_sha256(w) == hashlib.sha256(b"rebuilt horovod").hexdigest()


def test_wheels_are_picked_by_name_version_and_platform(tmp_path: Path):
    _write(tmp_path / "foo-1.0-py3-none-any.whl", b"")
    _write(tmp_path / "foo-1.0-cp27-cp27mu-linux_x86_64.whl", b"")  # not for this host
    _write(tmp_path / "Bar_Baz-2.0-cp311-cp311-win_amd64.whl", b"")  # not for this host
    _write(tmp_path / "not-a-wheel.whl", b"")
    found = images._wheels_in(tmp_path)
    assert {(n, str(v)): p.name for (n, v), p in found.items()} == {
        ("foo", "1.0"): "foo-1.0-py3-none-any.whl"
    }


def test_missing_wheels_without_fetch_say_to_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    hvd = _write(tmp_path / "hvd" / "horovod-0.28.1-py3-none-any.whl", b"")
    monkeypatch.setenv("TESTBED_IMAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(images, "horovod_wheel_dir", lambda: tmp_path / "hvd")
    monkeypatch.setattr(images, "pins", lambda: {"foo": "1.0", "horovod": "0.28.1"})
    with pytest.raises(EnvironmentProblem, match="testbed images build"):
        images.wheel_files(fetch=False)
    foo = _write(tmp_path / "cache" / "wheels" / "foo-1.0-py3-none-any.whl", b"")
    assert images.wheel_files(fetch=False) == [foo, hvd]
    hvd.unlink()
    with pytest.raises(EnvironmentProblem, match=r"install\.sh"):
        images.wheel_files(fetch=False)


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("horovod") is None,
    reason="torch and Horovod come from install.sh",
)
def test_pins_follow_this_venv():
    from importlib.metadata import version

    p = images.pins()
    assert "testbed" not in p
    for name in ("torch", "horovod", "pydantic", "pyroute2", "numpy", "cloudpickle"):
        assert p[name] == version(name)


def test_ensure_without_build_names_the_command(fake: Path):
    class Images:
        def get(self, ref: str):
            raise docker.errors.ImageNotFound(ref)

    class Client:
        images = Images()

    with pytest.raises(EnvironmentProblem, match="run `testbed images build`"):
        images.ensure_node_image(Client(), build=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rel", "is_dir", "skipped"),
    [
        ("dev", True, False),
        ("dev/null", False, True),
        ("proc/self", True, True),
        ("usr/bin/python3", False, False),
        ("usr/share/doc/bash", True, False),
        ("usr/share/doc/bash/copyright", False, False),
        ("usr/share/doc/bash/README.gz", False, True),
        ("usr/share/man/man1/ls.1.gz", False, True),
        ("var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease", False, True),
        ("var/lib/apt/lists/partial", True, False),
        ("var/cache/apt/archives/bash_5.2_amd64.deb", False, True),
        ("etc/apt/sources.list", False, False),
    ],
)
def test_what_stays_out_of_the_base(rel: str, is_dir: bool, skipped: bool):
    assert images._skip(rel, is_dir) is skipped


def test_root_file_system_streams_as_a_tar(tmp_path: Path):
    root = tmp_path / "root"
    _write(root / "usr" / "bin" / "tool", b"#!/bin/sh\n")
    os.chmod(root / "usr" / "bin" / "tool", 0o755)
    os.link(root / "usr" / "bin" / "tool", root / "usr" / "bin" / "tool2")
    os.symlink("usr/bin", root / "bin")
    _write(root / "dev" / "null", b"")
    _write(root / "usr" / "share" / "man" / "tool.1", b"man")
    caps = False
    try:  # a file capability, as ping has; setting one needs root
        os.setxattr(root / "usr" / "bin" / "tool", "security.capability", CAP_NET_RAW)
        caps = True
    except OSError:
        pass
    data = b"".join(images._tar_stream(root))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {
            "bin", "dev", "usr", "usr/bin", "usr/bin/tool", "usr/bin/tool2", "usr/share",
            "usr/share/man",
        }  # fmt: skip
        assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
        assert members["usr/bin/tool"].isreg() and members["usr/bin/tool"].mode & 0o777 == 0o755
        assert members["usr/bin/tool2"].islnk()
        assert tar.extractfile("usr/bin/tool").read() == b"#!/bin/sh\n"  # type: ignore[union-attr]
        if caps:
            raw = members["usr/bin/tool"].pax_headers["SCHILY.xattr.security.capability"]
            assert raw.encode("utf-8", "surrogateescape") == CAP_NET_RAW
