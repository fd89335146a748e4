"""HTTP/1.1 of the SIMULATOR (TEST ONLY) on asyncio streams: one request at a time per keep-alive
connection, plain and chunked responses, server-sent events written from the step clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

log = logging.getLogger("sglang_sim")


REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON like orjson / pydantic's model_dump_json."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str
    received: float  # event-loop time when the request had been read

    def json(self) -> dict[str, Any]:
        obj = json.loads(self.body or b"{}")
        if not isinstance(obj, dict):
            raise ValueError("request body must be a JSON object")
        return obj


class ClientGone(Exception):
    """The client closed the connection while we were answering."""


class Responder:
    """Writes one HTTP/1.1 response (plain or chunked) on a keep-alive connection."""

    def __init__(self, writer: asyncio.StreamWriter, req: HttpRequest, keep_alive: bool) -> None:
        self.writer, self.req, self.keep_alive = writer, req, keep_alive
        self.status = 0

    def _head(self, status: int, content_type: str | None, extra: str) -> bytes:
        self.status = status
        log.info('INFO:     %s - "%s %s HTTP/1.1" %d %s', self.req.peer, self.req.method, self.req.path,
                 status, REASONS.get(status, ""))
        conn = "keep-alive" if self.keep_alive else "close"
        kind = f"content-type: {content_type}\r\n" if content_type else ""  # None: a bare Response(status_code=...)
        # date as uvicorn sends it; vary: Origin as SGLang's CORSMiddleware (allow_credentials) adds to every answer.
        return (f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\ndate: {formatdate(usegmt=True)}\r\nserver: sglang-sim\r\n"
                f"{kind}vary: Origin\r\nconnection: {conn}\r\n{extra}\r\n").encode("latin-1")

    async def _write(self, data: bytes) -> None:
        if self.writer.transport.is_closing():
            raise ClientGone()
        self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone() from exc

    async def send(self, status: int, body: bytes, content_type: str | None = "application/json",
                   headers: str = "") -> None:
        """headers: more header lines, each ending in CRLF."""
        await self._write(self._head(status, content_type, f"{headers}content-length: {len(body)}\r\n") + body)

    async def send_json(self, status: int, obj: Any, headers: str = "") -> None:
        await self.send(status, dumps(obj), headers=headers)

    def _write_nowait(self, data: bytes) -> None:
        """Queue bytes on the transport at once (it sends right away while the socket has room)."""
        if self.writer.transport.is_closing():
            raise ClientGone()
        self.writer.write(data)

    def start_stream(self) -> None:
        self._write_nowait(self._head(200, "text/event-stream; charset=utf-8", "transfer-encoding: chunked\r\n"))

    def event(self, payload: bytes) -> None:
        """One SSE event as one HTTP chunk, written synchronously from the step clock."""
        data = b"data: " + payload + b"\n\n"
        self._write_nowait(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_stream(self) -> None:
        self.event(b"[DONE]")
        await self._write(b"0\r\n\r\n")


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> HttpRequest | None:
    """Parse one request; None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    length = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), target.split("?", 1)[0], headers, body, peer,
                       asyncio.get_running_loop().time())
