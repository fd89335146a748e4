"""TEST DOUBLE of a site's HTTP proxy: forwards absolute-form requests, optionally asks for Basic auth.

Sites reach the Hub through a proxy (`sglang_model_proxy_env`); the staging tool speaks to it with
both of its HTTP stacks (the client's httpx for metadata, its own mover for the bytes). This proxy
forwards `GET`/`HEAD http://host:port/path` to the origin as a plain proxy does (redirects and
errors passed through, not followed; hop-by-hop headers dropped), streams bodies, and counts what
it forwarded and what it refused. `CONNECT` (TLS tunnels) is answered 501: the test Hub is plain HTTP.

    proxy = ForwardProxy(user="site", password="s3cret").start()
    proxy.url            # http://site:s3cret@127.0.0.1:PORT (what https_proxy / http_proxy name)
    proxy.stats()        # {"forwarded": {"HEAD 127.0.0.1:N": 3, ...}, "refused": 0, "bytes": ...}
"""

from __future__ import annotations

import base64
import http.client
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "proxy-connection"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "forward-proxy/1 (TEST DOUBLE)"
    proxy: ForwardProxy

    def log_message(self, fmt, *args):
        pass

    def do_CONNECT(self):
        self.send_error(501, "CONNECT is not implemented by this test proxy")

    def do_GET(self):
        self.forward()

    def do_HEAD(self):
        self.forward()

    def forward(self):
        if not self.proxy.authorized(self.headers.get("Proxy-Authorization")):
            self.proxy.count("refused")
            self.send_response(407)
            self.send_header("Proxy-Authenticate", 'Basic realm="test proxy"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        u = urllib.parse.urlsplit(self.path)
        if u.scheme != "http" or not u.hostname:
            self.send_error(400, "absolute-form http:// request expected")
            return
        self.proxy.count("forwarded", f"{self.command} {u.netloc}")
        origin = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            origin.request(self.command, urllib.parse.urlunsplit(("", "", u.path or "/", u.query, "")),
                           headers=headers)
            resp = origin.getresponse()
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            if self.command != "HEAD" and resp.getheader("Content-Length") is None:
                self.close_connection = True  # the body ends when the connection does (chunking dropped)
            self.end_headers()
            if self.command == "HEAD":
                return
            buf = bytearray(1 << 20)
            while True:
                n = resp.readinto(buf)
                if not n:
                    break
                self.wfile.write(memoryview(buf)[:n])
                self.proxy.count("bytes", n=n)
            if resp.length:  # an origin that hung up mid-body: the client sees the same (a short body)
                self.close_connection = True
        except OSError:
            self.close_connection = True
        finally:
            origin.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up (a killed download): nothing to report


class ForwardProxy:
    """The proxy in a background thread (for pytest)."""

    def __init__(self, user: str = "", password: str = "", host: str = "127.0.0.1"):
        handler = type("BoundProxyHandler", (_Handler,), {"proxy": self})
        self.server = _Server((host, 0), handler)
        self.host, self.port = self.server.server_address[:2]
        self.user, self.password = user, password
        cred = f"{urllib.parse.quote(user)}:{urllib.parse.quote(password)}@" if user else ""
        self.url = f"http://{cred}{self.host}:{self.port}"
        self._lock = threading.Lock()
        self._stats: dict = {"forwarded": {}, "refused": 0, "bytes": 0}

    def authorized(self, header: str | None) -> bool:
        if not self.user:
            return True
        want = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return header == want

    def count(self, what: str, key: str = "", n: int = 1) -> None:
        with self._lock:
            if what == "forwarded":
                self._stats["forwarded"][key] = self._stats["forwarded"].get(key, 0) + 1
            else:
                self._stats[what] += n

    def stats(self) -> dict:
        with self._lock:
            return {"forwarded": dict(self._stats["forwarded"]), "refused": self._stats["refused"],
                    "bytes": self._stats["bytes"]}

    def start(self) -> ForwardProxy:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
