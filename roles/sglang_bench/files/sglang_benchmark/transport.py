"""HTTP to the server, standard library only: where and how to reach it (Server), and a streamed
response read with asyncio, chunked transfer decoded (ChunkedDecoder, HttpStream)."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

from .protocol import BenchError


class Server:
    """Where and how to reach the server (URL, key, timeout); opens one connection per request."""

    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--url must look like http://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    @property
    def host_header(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def get_json(self, path: str) -> dict[str, Any]:
        """A small GET (server info); the streaming requests use HttpStream."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", self.base + path, headers=self.headers())
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise BenchError(f"GET {path}: HTTP {resp.status} {resp.reason}: {body[:200]!r}")
            return json.loads(body)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BenchError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()




class ChunkedDecoder:
    """Incremental decoder of HTTP/1.1 chunked transfer coding (how SGLang's uvicorn streams)."""

    def __init__(self) -> None:
        self.buf = b""
        self.data_left = 0
        self.crlf_pending = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out: list[bytes] = []
        while not self.done:
            if self.data_left:
                if not self.buf:
                    break
                piece = self.buf[: self.data_left]
                self.buf = self.buf[len(piece):]
                self.data_left -= len(piece)
                self.crlf_pending = self.data_left == 0
                out.append(piece)
            elif self.crlf_pending:
                if len(self.buf) < 2:
                    break
                self.buf, self.crlf_pending = self.buf[2:], False
            else:
                end = self.buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(self.buf[:end].split(b";", 1)[0].strip(), 16)
                self.buf = self.buf[end + 2:]
                self.data_left = size
                self.done = size == 0
        return b"".join(out)


class HttpStream:
    """One POST over its own connection, read as it arrives (asyncio streams, no threads).

    Why not http.client and a thread per request: with dozens of streams in flight, Python
    threads queue for the GIL and stamp events milliseconds late; one event loop reads each
    event as soon as the socket has it, which is what the timing needs.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.status = 0
        self.reason = ""
        self._decoder: ChunkedDecoder | None = None
        self._length: int | None = None

    async def connect(self) -> None:
        ssl_ctx = ssl.create_default_context() if self.server.scheme == "https" else None
        self.reader, self.writer = await asyncio.open_connection(self.server.host, self.server.port, ssl=ssl_ctx)

    async def send(self, path: str, body: bytes) -> None:
        assert self.writer is not None
        lines = [f"POST {self.server.base}{path} HTTP/1.1", f"Host: {self.server.host_header}",
                 f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in self.server.headers().items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await self.writer.drain()

    async def read_head(self) -> None:
        assert self.reader is not None
        try:
            head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        except asyncio.IncompleteReadError:
            raise BenchError("the server closed the connection before answering") from None
        _, status, *reason = head[0].split(" ", 2)
        self.status, self.reason = int(status), (reason[0] if reason else "")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._decoder = ChunkedDecoder()
        elif "content-length" in headers:
            self._length = int(headers["content-length"])

    async def read_body(self) -> bytes:
        """The next piece of the body as it arrives; b"" at its end."""
        assert self.reader is not None
        if self._decoder is not None:
            while not self._decoder.done:
                data = await self.reader.read(65536)
                if not data:
                    raise BenchError("stream dropped mid-way: the connection closed inside the chunked body")
                piece = self._decoder.feed(data)
                if piece:
                    return piece
            return b""
        if self._length is not None:
            if self._length <= 0:
                return b""
            data = await self.reader.read(min(self._length, 65536))
            if not data:
                raise BenchError("stream dropped mid-way: the connection closed before the end of the body")
            self._length -= len(data)
            return data
        return await self.reader.read(65536)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
