"""The byte path of Hub downloads: the Mover, Python's standard library only."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import os
import re
import ssl
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path


class MoveError(Exception):
    """A transfer that failed; `fatal` ones (a refusal, a plan that disagrees) are not retried."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


def shown(url: str) -> str:
    """A URL for messages: no query string (a CDN's signed URL carries its credentials there)."""
    u = urllib.parse.urlsplit(url)
    return f"{u.scheme}://{u.netloc}{u.path}"


class Mover:
    """Move one file's bytes over HTTP(S) with the standard library: resumable, hashed, durable.

    The client (huggingface_hub) still does everything but the bytes: the file's metadata request
    with the vault token (which answers where the bytes are: the Hub itself, a CDN, or Xet's bridge),
    the headers. Its own byte path (httpx, httpcore, h11) copies each piece in Python several times;
    here each piece is read straight into one buffer (`readinto`), written and hashed, and every
    WRITEBACK bytes pushed to disk (`sync_file_range`), all with the interpreter lock released, so
    threads overlap on few cores. Measured: tests/roles/sglang_model/test_throughput.py.

    The partial file is the client's own `.incomplete` (same name, same place), so a download started
    by either resumes in the other. Settings follow the client's: the proxy variables of the
    environment (`https_proxy`, `no_proxy`, ...), the CA bundle (`SSL_CERT_FILE`, else the system's
    and certifi's), `Accept-Encoding: identity`, redirects followed with the Authorization header
    dropped when the host changes, a stalled read given up after the download timeout, and a broken
    stream resumed with `Range` up to 5 times in a row without new bytes.
    """

    STALLS = 5
    REDIRECTS = 8
    WRITEBACK = 32 << 20  # bytes between writeback starts (sync_file_range); 0: only the fsync at the end

    def __init__(self, source: dict, read_size: int):
        self.timeout = float(source.get("download_timeout", 60))
        self.read_size = max(64 << 10, read_size)
        self.ca_bundle = source.get("ca_bundle") or ""
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = threading.Lock()
        self.proxies = urllib.request.getproxies_environment()

    @property
    def ssl(self) -> ssl.SSLContext:
        """The TLS context, made at the first https URL (loading CA files costs ~0.1 s)."""
        with self._ssl_lock:
            if self._ssl is None:
                if self.ca_bundle:
                    self._ssl = ssl.create_default_context(cafile=self.ca_bundle)
                else:
                    self._ssl = ssl.create_default_context()
                    with contextlib.suppress(ImportError, OSError):
                        import certifi  # the client's dependency, in its venv
                        self._ssl.load_verify_locations(certifi.where())
            return self._ssl

    def proxy_for(self, u: urllib.parse.SplitResult) -> str | None:
        if urllib.request.proxy_bypass_environment(u.netloc, self.proxies):
            return None
        return self.proxies.get(u.scheme) or self.proxies.get("all")

    def supports(self, url: str) -> bool:
        """False where the client must move the bytes itself (a proxy spoken to over TLS)."""
        u = urllib.parse.urlsplit(url)
        proxy = self.proxy_for(u)
        return u.scheme in ("http", "https") and (proxy is None or urllib.parse.urlsplit(proxy).scheme == "http")

    def connect(self, u: urllib.parse.SplitResult) -> tuple[http.client.HTTPConnection, str, dict]:
        """A connection for URL u, the request target, and headers for the proxy."""
        port = u.port or (443 if u.scheme == "https" else 80)
        target = u.path or "/"
        if u.query:
            target += "?" + u.query
        proxy = self.proxy_for(u)
        if proxy is None:
            if u.scheme == "https":
                return http.client.HTTPSConnection(u.hostname, port, timeout=self.timeout, context=self.ssl), target, {}
            return http.client.HTTPConnection(u.hostname, port, timeout=self.timeout), target, {}
        p = urllib.parse.urlsplit(proxy)
        auth = {}
        if p.username:
            pair = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
            auth["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        if u.scheme == "https":  # CONNECT through the proxy, then TLS with the origin
            conn = http.client.HTTPSConnection(p.hostname, p.port or 80, timeout=self.timeout, context=self.ssl)
            conn.set_tunnel(u.hostname, port, headers=auth)
            return conn, target, {}
        return http.client.HTTPConnection(p.hostname, p.port or 80, timeout=self.timeout), \
            urllib.parse.urlunsplit(u._replace(fragment="")), auth

    def open(self, url: str, headers: dict, offset: int):
        """GET url from byte `offset`, following redirects: (connection, response)."""
        headers = {k: v for k, v in headers.items() if v is not None}
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = f"bytes={offset}-"
        for _ in range(self.REDIRECTS):
            u = urllib.parse.urlsplit(url)
            conn, target, extra = self.connect(u)
            try:
                conn.request("GET", target, headers={**headers, **extra})
                resp = conn.getresponse()
            except BaseException:
                conn.close()
                raise
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                resp.read(1 << 16)
                conn.close()
                nxt = urllib.parse.urljoin(url, resp.getheader("Location"))
                if urllib.parse.urlsplit(nxt).netloc != u.netloc:
                    headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                url = nxt
                continue
            return conn, resp, url
        raise MoveError(f"more than {self.REDIRECTS} redirects from {shown(url)}")

    def fetch(self, url: str, headers: dict, incomplete: Path, final: Path, size: int, what: str) -> str:
        """Download url into `incomplete` (resuming what it holds), then rename it to `final`.

        Returns the sha256 of the file's bytes; the caller compares it with the plan's.
        """
        incomplete.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(incomplete, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            pos = os.fstat(fd).st_size
            if pos > size:  # longer than the file can be: not a partial of it
                os.ftruncate(fd, 0)
                pos = 0
            h = hashlib.sha256()
            buf = bytearray(self.read_size)
            view = memoryview(buf)
            done = 0
            while done < pos:  # the bytes a killed run left: hashed, not fetched again
                n = os.preadv(fd, [view[:min(len(view), pos - done)]], done)
                if not n:
                    break
                h.update(view[:n])
                done += n
            stalls, why = 0, ""
            while pos < size:
                before = pos
                try:
                    pos, h = self.transfer(url, headers, fd, pos, size, h, view, what)
                except MoveError:
                    raise
                except (OSError, http.client.HTTPException) as exc:
                    why = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
                else:
                    why = "the connection closed early"
                if pos >= size:
                    break
                stalls = 0 if pos > before else stalls + 1
                if stalls >= self.STALLS:
                    raise MoveError(f"{what}: no new bytes from {shown(url)} after {self.STALLS} attempts "
                                    f"({why}; {pos} of {size} bytes on disk)")
                time.sleep(1)
            os.fsync(fd)
        finally:
            os.close(fd)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(incomplete, final)
        return h.hexdigest()

    def transfer(self, url, headers, fd, pos, size, h, view, what):
        """One request from byte `pos`: (bytes on disk now, hash of them)."""
        conn, resp, where = self.open(url, headers, pos)
        try:
            if resp.status == 200 and pos:
                os.ftruncate(fd, 0)  # the server ignored Range: start over (as the client does)
                pos, h = 0, hashlib.sha256()
            elif resp.status == 206:
                got = re.match(r"bytes (\d+)-", resp.getheader("Content-Range") or "")
                if not got or int(got.group(1)) != pos:
                    raise MoveError(f"{what}: {shown(where)} answered Range bytes={pos}- with "
                                    f"Content-Range {resp.getheader('Content-Range')!r}")
            elif resp.status != 200:
                code = resp.getheader("X-Error-Code") or ""
                text = (resp.getheader("X-Error-Message") or resp.read(1 << 12).decode(errors="replace")).strip()
                raise MoveError(f"{what}: HTTP {resp.status}{' ' + code if code else ''} from {shown(where)}"
                                f"{': ' + text.splitlines()[0][:200] if text else ''}")
            sync = getattr(os, "sync_file_range", None) if self.WRITEBACK else None
            synced = pos
            while pos < size:
                n = resp.readinto(view[:min(len(view), size - pos)])
                if not n:
                    break
                piece = view[:n]
                written = 0
                while written < n:
                    written += os.pwrite(fd, piece[written:], pos + written)
                h.update(piece)
                pos += n
                if sync is not None and pos - synced >= self.WRITEBACK:
                    # Start writing back what arrived, in large ranges: the fsync at the end has little left.
                    sync(fd, synced, pos - synced, os.SYNC_FILE_RANGE_WRITE)
                    synced = pos
            return pos, h
        finally:
            conn.close()
