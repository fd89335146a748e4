#!/usr/bin/python
"""Ansible module: register or remove workers in a running gateway (smg 1.13 or sglang-router 0.3.2, one worker API)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_workers
short_description: Register or remove SGLang workers in a running gateway (smg or sglang-router)
description:
  - Talks to the gateway's worker API (smg 1.13 and sglang-router 0.3.2 alike) C(GET /workers),
    C(POST /workers) and C(DELETE /workers/{id}); the gateway applies both asynchronously (202), so the
    module polls C(GET /workers) until the change is visible, or fails after I(timeout) seconds.
  - Every call is a control-plane call: with control-plane keys configured the gateway takes only those
    (an admin key) and refuses the clients' key (401).
  - Removing a worker stops new requests to it; requests already streaming from it finish.
  - Runs on the router host (or any host that reaches the router).
options:
  router_url:
    description: Base URL of the router, e.g. C(http://127.0.0.1:30080).
    type: str
    required: true
  api_key:
    description: The gateway's control-plane key (sent as a bearer token); empty for none.
    type: str
    default: ""
    no_log: true
  worker_api_key:
    description:
      - The key the workers expect, registered with each worker the module adds (the gateway sends it to
        that worker); empty for none. Neither release gives a worker added through the API its own --api-key.
    type: str
    default: ""
    no_log: true
  workers:
    description: Worker URLs to register (present) or remove (absent); not read with C(live).
    type: list
    elements: str
    default: []
  state:
    description:
      - C(present) registers missing workers, C(absent) removes registered ones.
      - C(live) only waits until the gateway answers C(GET /liveness) with 200 (a refused connection is waited for
        too), for at most I(timeout) seconds; it changes nothing.
    type: str
    choices: [present, absent, live]
    default: present
  socket_mark:
    description:
      - A firewall mark (SO_MARK, root only) set on every connection the module opens; 0 sets none.
      - The role's handover (tasks/handover.yml) exempts connections with its mark from the redirect of the gateway's
        port, so that the module reaches the gateway on the real port while clients are sent to the handover instance.
    type: int
    default: 0
  wait_healthy:
    description: With C(present), also wait until the router reports every listed worker healthy.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for the router to apply the change (and for health).
    type: int
    default: 60
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Take this host out of the router
  sglang_router_workers:
    router_url: http://127.0.0.1:30080
    api_key: "{{ sglang_router_control_plane_api_key }}"
    workers: [http://gpu1:30000]
    state: absent
"""

RETURN = r"""
added:
  description: Worker URLs registered by this run.
  type: list
  returned: always
removed:
  description: Worker URLs removed by this run.
  type: list
  returned: always
workers:
  description: The router's workers after the run, as {url, healthy}.
  type: list
  returned: always
"""

import http.client
import json
import socket
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


class RouterError(Exception):
    pass


SO_MARK = getattr(socket, "SO_MARK", 36)  # Linux; Python names it from 3.12 on


def marked_opener(mark: int):
    """A urllib opener whose HTTP connections carry the firewall mark `mark` (set before connect, so the first packet
    has it: the nat hook decides on that one)."""

    class MarkedConnection(http.client.HTTPConnection):
        def connect(self):
            error = OSError(f"no address for {self.host}")
            for family, kind, proto, _, address in socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM):
                sock = socket.socket(family, kind, proto)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
                    sock.settimeout(self.timeout)
                    sock.connect(address)
                except OSError as exc:
                    sock.close()
                    error = exc
                    continue
                self.sock = sock
                return
            raise error

    class MarkedHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(MarkedConnection, req)

    return urllib.request.build_opener(MarkedHandler)


class Router:
    def __init__(self, base: str, api_key: str, timeout: float = 10.0, mark: int = 0) -> None:
        self.base = base.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout
        self.open = marked_opener(mark).open if mark else urllib.request.urlopen

    def live(self, timeout: float) -> None:
        """Until GET /liveness answers 200 (connection errors and other answers waited for), at most timeout s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.open(urllib.request.Request(self.base + "/liveness"), timeout=self.timeout) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            if time.monotonic() >= deadline:
                raise RouterError(f"GET /liveness: no answer 200 within {timeout:.0f} s (last: {last})")
            time.sleep(0.5)

    def call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=self.headers, method=method)
        try:
            with self.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise RouterError(f"{method} {path}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RouterError(f"{method} {path}: {exc}") from None
        return json.loads(raw) if raw else {}

    def workers(self) -> dict[str, dict]:
        """url -> worker record, URLs without a trailing slash."""
        return {w["url"].rstrip("/"): w for w in self.call("GET", "/workers").get("workers", [])}


def wait_for(router: Router, done, timeout: float, what: str) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        current = router.workers()
        if done(current):
            return current
        if time.monotonic() >= deadline:
            raise RouterError(f"timed out after {timeout:.0f} s waiting for the router: {what}")
        time.sleep(0.5)


def run(module: AnsibleModule) -> dict:
    p = module.params
    router = Router(p["router_url"], p["api_key"], mark=p.get("socket_mark") or 0)
    if p["state"] == "live":
        if not module.check_mode:
            router.live(p["timeout"])
        return {"changed": False, "added": [], "removed": [], "workers": []}
    spec = {"api_key": p["worker_api_key"]} if p["worker_api_key"] else {}
    wanted = [u.rstrip("/") for u in p["workers"]]
    current = router.workers()
    if p["state"] == "absent":
        todo = [u for u in wanted if u in current]
        if todo and not module.check_mode:
            for url in todo:
                router.call("DELETE", f"/workers/{current[url]['id']}")
            current = wait_for(router, lambda cur: not any(u in cur for u in todo), p["timeout"],
                               "removal of " + ", ".join(todo))
        return {"changed": bool(todo), "added": [], "removed": todo, "workers": summary(current)}
    todo = [u for u in wanted if u not in current]
    if not module.check_mode:
        for url in todo:
            try:
                router.call("POST", "/workers", {"url": url, **spec})
            except RouterError as exc:
                # 409: the gateway knows the worker already (a gateway just started registers the workers of its
                # command line after it listens: the list read above can miss one it is registering). The wait
                # below still requires it registered.
                if " HTTP 409 " not in f" {exc} ":
                    raise
        if todo:
            current = wait_for(router, lambda cur: all(u in cur for u in todo), p["timeout"],
                               "registration of " + ", ".join(todo))
        if p["wait_healthy"]:
            current = wait_for(router, lambda cur: all(cur.get(u, {}).get("is_healthy") for u in wanted),
                               p["timeout"], "health of " + ", ".join(wanted))
    return {"changed": bool(todo), "added": todo, "removed": [], "workers": summary(current)}


def summary(current: dict[str, dict]) -> list[dict]:
    return [{"url": url, "healthy": bool(w.get("is_healthy"))} for url, w in sorted(current.items())]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "worker_api_key": {"type": "str", "default": "", "no_log": True},
            "workers": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["present", "absent", "live"], "default": "present"},
            "socket_mark": {"type": "int", "default": 0},
            "wait_healthy": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except RouterError as exc:
        hint = (" (the gateway refused the control-plane key: sglang_router_control_plane_api_key must be the one the"
                " gateway was started with; a gateway not yet converged by playbooks/router.yml has none)"
                if " HTTP 401 " in f" {exc} " or " HTTP 403 " in f" {exc} " else "")
        module.fail_json(msg=f"gateway at {module.params['router_url']}: {exc}{hint}")


if __name__ == "__main__":
    main()
