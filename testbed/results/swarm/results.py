"""Run folders coming back from the nodes: the sweep runs an HTTP receiver on the manager's
swarm address; a point's task PUTs its run folder there as a gzip'd tar, under a token the
sweep gave that point only. The receiver unpacks it (tarfile's "data" filter: no absolute
paths, links out of the folder or devices) into a temporary folder beside the point's, then
renames it into place, so a point's folder is whole or absent. Stdlib only: the node side
runs it inside the point's container."""

from __future__ import annotations

import io
import secrets
import shutil
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_BYTES = 4 << 30  # a run folder larger than this is refused (a TSDB of days, a bug)


@dataclass
class Expected:
    dest: Path
    exit_code: int | None = None  # the point's `testbed up` exit code, once its folder is here
    error: str | None = None
    arrived: threading.Event = field(default_factory=threading.Event)


class Receiver:
    """Accepts each expected run folder once."""

    def __init__(self, address: str) -> None:
        self.expected: dict[str, Expected] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                receiver.handle(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{address}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def expect(self, dest: Path) -> str:
        """A token for the run folder that will land at `dest`."""
        token = secrets.token_hex(16)
        with self.lock:
            self.expected[token] = Expected(dest)
        return token

    def forget(self, token: str) -> None:
        with self.lock:
            self.expected.pop(token, None)

    def get(self, token: str) -> Expected | None:
        with self.lock:
            return self.expected.get(token)

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        token = req.path.strip("/")
        with self.lock:
            e = self.expected.get(token)
        size = int(req.headers.get("Content-Length", "0"))
        if e is None or e.arrived.is_set() or not 0 < size <= MAX_BYTES:
            req.send_response(403 if e is None else 409 if e.arrived.is_set() else 413)
            req.end_headers()
            return
        tmp = e.dest.with_name(e.dest.name + ".incoming")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with tempfile.TemporaryFile() as body:  # a TSDB may be large: not in memory
                left = size
                while left > 0:
                    chunk = req.rfile.read(min(left, 1 << 20))
                    if not chunk:
                        raise ValueError(f"the upload ended {left} bytes short")
                    body.write(chunk)
                    left -= len(chunk)
                body.seek(0)
                with tarfile.open(fileobj=body, mode="r:gz") as tar:
                    tar.extractall(tmp, filter="data")
            if e.dest.exists():
                shutil.rmtree(e.dest)
            tmp.rename(e.dest)
            e.exit_code = int(req.headers.get("X-Testbed-Exit", "1"))
        except (tarfile.TarError, OSError, ValueError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            e.error = f"its run folder did not unpack: {exc}"
        e.arrived.set()
        req.send_response(200 if e.error is None else 400)
        req.end_headers()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        for p in sorted(folder.iterdir()):
            tar.add(p, arcname=p.name)
    return buf.getvalue()


def upload(url: str, token: str, folder: Path, exit_code: int, tries: int = 5) -> None:
    """PUT `folder` to the sweep's receiver (from inside a point's task)."""
    body = pack(folder)
    for attempt in range(tries):
        req = urllib.request.Request(
            f"{url}/{token}",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/gzip", "X-Testbed-Exit": str(exit_code)},
        )
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                r.read()
            return
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError):
            if attempt == tries - 1:
                raise
            time.sleep(2**attempt)
