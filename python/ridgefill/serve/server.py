"""Run the patched llama-server as a child process on loopback and talk to it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import RidgefillError
from ..paths import tool_path


class ServerError(RidgefillError, RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def ridgefill_flags(mode: str, split: int | None = None, sinks: int | None = None, tail: int | None = None) -> list[str]:
    """The --ridgefill* flags of llama-server and llama-bench for a mode name (route.parse_mode: 'ridge@5'
    routes 5 %, 'ridge^10' selects 10 %); None leaves a value to the GGUF, exact adds none. The routed share is
    always explicit."""
    from ..fit.route import parse_mode, selected_share

    base, share = parse_mode(mode)
    if base == "exact":
        return []
    flags = ["--ridgefill", base, "--ridgefill-route", f"{share:g}"]
    if selected_share(mode) > 0:
        flags += ["--ridgefill-select", f"{selected_share(mode):g}"]
    for name, value in (("split", split), ("sink", sinks), ("tail", tail)):
        if value is not None:
            flags += [f"--ridgefill-{name}", str(value)]
    return flags


def maps_flags(maps) -> list[str]:
    """llama-server's and llama-bench's flag for a maps file beside the model (none without one)."""
    return ["--ridgefill-maps", str(maps)] if maps else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """`with LlamaServer(model, args) as srv: srv.post("/completion", {...})`"""

    def __init__(self, model: str | os.PathLike, extra_args: list[str] = (), ctx: int = 8192, threads: int | None = None,
                 log: str | os.PathLike | None = None, startup_timeout: float = 120.0, n_parallel: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [str(tool_path("llama-server")), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                     "-c", str(ctx), "-np", str(n_parallel), "-t", str(threads or os.cpu_count() or 1), *extra_args]
        self.log_path = Path(log) if log else None
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "LlamaServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        out = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"llama-server exited with code {self.proc.returncode} during startup{self._log_hint()}")
            try:
                if self.get("/health").get("status") == "ok":
                    return
            except (urllib.error.URLError, ConnectionError, OSError, ServerError):
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerError(f"llama-server did not become healthy in {self.startup_timeout:.0f} s{self._log_hint()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _log_hint(self) -> str:
        return f" (log: {self.log_path})" if self.log_path else ""

    def get(self, path: str) -> dict:
        return self._request(urllib.request.Request(self.url + path))

    def post(self, path: str, body: dict, timeout: float = 600.0) -> dict:
        return self.post_raw(path, json.dumps(body).encode(), timeout)

    def post_raw(self, path: str, data: bytes, timeout: float = 600.0) -> dict:
        """POST `data` as it is (a malformed body, for tests)."""
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        return self._request(req, timeout)

    def _request(self, req, timeout: float = 10.0) -> dict:
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            body = err.read().decode("utf-8", "replace")
            raise ServerError(f"HTTP {err.code} from {req.full_url}: {body}", status=err.code) from None


def ttft_ms(srv: LlamaServer, prompt: list[int], mode: str) -> tuple[float, dict]:
    """TTFT as bench and demo measure it: the wall time of a 1-token, greedy completion of a prompt
    the server may not reuse from its cache; (milliseconds, response)."""
    from ..fit.route import parse_mode, selected_share

    base, share = parse_mode(mode)
    body = {"prompt": prompt, "n_predict": 1, "temperature": 0.0, "cache_prompt": False, "ridgefill": base}
    if base != "exact":
        body["ridgefill_route"], body["ridgefill_select"] = share, selected_share(mode)
    t0 = time.perf_counter()
    res = srv.post("/completion", body)
    return 1000 * (time.perf_counter() - t0), res


class ServerPool:
    """llama-servers by name, started on first use. `exclusive`: at most one runs at a time (an rpc-server
    serves one client at a time, so servers that share rpc-servers take turns); each one's peak RSS is kept."""

    def __init__(self, servers: dict[str, LlamaServer], exclusive: bool = False):
        self.servers, self.exclusive = servers, exclusive
        self._peak_mb = dict.fromkeys(servers, 0.0)

    def get(self, name: str, on_start=None) -> LlamaServer:
        """The running server `name`; `on_start(server)` runs once it has (re)started."""
        srv = self.servers[name]
        if not srv.alive():
            if self.exclusive:
                self._stop(lambda other: other != name)
            srv.start()
            if on_start:
                on_start(srv)
        return srv

    def peak_rss_mb(self, name: str) -> float:
        srv = self.servers[name]
        return max(self._peak_mb[name], _vm_hwm_mb(srv.proc.pid) if srv.alive() else 0.0)

    def stop(self) -> None:
        self._stop(lambda _: True)

    def _stop(self, which) -> None:
        for name, srv in self.servers.items():
            if which(name) and srv.alive():
                self._peak_mb[name] = self.peak_rss_mb(name)
                srv.stop()

    def __enter__(self) -> "ServerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _vm_hwm_mb(pid: int) -> float:
    """A live process's peak resident memory."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RpcServers:
    """`with RpcServers(2) as rpc: LlamaServer(model, ["--rpc", rpc.endpoints, "-ngl", "99"])`: ggml-rpc-server
    processes on loopback (never expose one to a network: the RPC protocol has no authentication)."""

    def __init__(self, n: int, threads: int = 1, startup_timeout: float = 60.0):
        self.ports = [free_port() for _ in range(n)]
        self.threads, self.startup_timeout = threads, startup_timeout
        self.procs: list[subprocess.Popen] = []

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def __enter__(self) -> "RpcServers":
        exe = str(tool_path("ggml-rpc-server"))
        for port in self.ports:
            self.procs.append(subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port), "-t", str(self.threads)],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               stdin=subprocess.DEVNULL))
        try:
            for port, proc in zip(self.ports, self.procs):
                self._wait_listening(port, proc)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_listening(self, port: int, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerError(f"ggml-rpc-server on port {port} exited with code {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise ServerError(f"ggml-rpc-server on port {port} did not listen within {self.startup_timeout:.0f} s")

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
