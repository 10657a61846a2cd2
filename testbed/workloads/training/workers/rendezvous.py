"""Horovod's Gloo rendezvous store, served by one asyncio thread.

Horovod's own RendezvousHTTPServer (http.server with a thread per request) is what horovodrun
uses, and it is correct but slow for this job: every Gloo context (six of them: global, local
and cross, then the same for the global process set) is built by each rank polling the store
every 10 ms with a new HTTP/1.0 connection per key, and eight ranks kept it at ~350 requests/s
for 7.5 s before every run. This server speaks the same protocol (GET/PUT/DELETE on
/scope/key; a DELETE from every rank of a known scope clears it, as RendezvousHandler does)
with a fraction of the per-request cost. The scope sizes come from Horovod's own host
assignments, so the behaviour matches the library's server key for key.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

STATUS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class RendezvousStore:
    def __init__(self, address: str, slots: list[Any]) -> None:
        self.cache: dict[str, dict[str, bytes]] = {}
        self.finished: dict[str, list[str]] = {}
        self.scope_size: dict[str, int] = {}
        for s in slots:  # as RendezvousHTTPServer._extract_scope_size
            self.scope_size["global"] = s.size
            self.scope_size[f"local_{s.hostname}"] = s.local_size
            self.scope_size[f"cross_{s.local_rank}"] = s.cross_size
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, address, 0, backlog=1024)
        )
        self.port: int = self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            status, payload = self._serve(method, path, body)
            writer.write(
                f"HTTP/1.0 {status} {STATUS[status]}\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
            ConnectionError,
        ):
            pass
        finally:
            writer.close()

    def _serve(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        parts = path.split("/")
        if len(parts) != 3:
            return 400, b""
        _, scope, key = parts
        if method == "GET":
            value = self.cache.get(scope, {}).get(key)
            return (404, b"") if value is None else (200, value)
        if method == "PUT":
            self.cache.setdefault(scope, {})[key] = body
            return 200, b""
        if method == "DELETE":
            if scope in self.scope_size:
                done = self.finished.setdefault(scope, [])
                done.append(key)
                if len(done) == self.scope_size[scope]:
                    self.cache.get(scope, {}).clear()
                    self.finished.clear()
            else:
                d = self.cache.get(scope)
                if d is not None:
                    d.pop(key, None)
                    if not d:
                        del self.cache[scope]
            return 200, b""
        return 400, b""

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            await self._server.wait_closed()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
