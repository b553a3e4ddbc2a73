"""`kvscope attach` against loopback: a local HTTP server serving the captured /metrics and a
publisher replaying the captured KV event batches (a gap that replay fills, a server restart).
The headless command's JSON counts, every error as one line and exit 2, the AttachSession's
frames, and kvscope's prediction beside the server's own figures."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from attach_fixtures import (
    WAIT_S,
    cached_after_run1,
    expected_events,
    play_script,
    vllm_routes,
)
from kvscope.app.cli.main import main
from kvscope.app.host.attach_session import AttachSession
from kvscope.app.host.protocol import APPLY, AttachFrame
from kvscope.app.lab.vllm.attachment import AttachTarget
from kvscope.app.lab.vllm.prediction import predict
from kvscope.engine.config import ModelConfig
from kvscope.engine.snapshot import BLOCK_CACHED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attach(*args) -> int:
    return main(["attach", *map(str, args)])


def test_headless_attach_counts_what_the_publisher_sent(server, publisher, tmp_path, capsys):
    http, pub = server(), publisher()
    play_script(pub)
    out = tmp_path / "attach.json"
    assert attach(http.url, "--kv-events", pub.endpoint, "--replay", pub.replay_endpoint, "--duration", 2,
                  "--json", out) == 0
    report = json.loads(out.read_text())
    expected = expected_events()
    assert report["server_version"] == "0.32.0"
    assert report["model_names"] == ["tiny"]
    assert (report["num_gpu_blocks"], report["block_size"]) == (12, 32)
    assert report["events"] == expected["events"]
    assert (report["blocks_stored"], report["blocks_removed"]) == (expected["stored"], expected["removed"])
    assert report["batches"] == 22 + 4
    assert report["gaps"] == 1 and report["batches_lost"] == 0
    assert report["batches_replayed"] >= 3  # the three missing, and any the publisher had sent by then
    assert 10 in pub.replay_requests
    assert report["restarts"] == 1 and report["decode_errors"] == 0
    assert report["blocks_cached"] == cached_after_run1()
    metrics = report["metrics"]
    assert metrics["preemptions"] == 3  # the pressure run's, from vllm:num_preemptions_total
    for name in ("preemptions", "prompt_tokens", "output_tokens", "prefix_cache_hit_rate", "ttft_p50_s",
                 "ttft_p99_s", "queue_time_p50_s", "e2e_latency_p99_s", "peak_kv_usage", "peak_running"):
        assert name in metrics  # named as `kvscope run --json` names them
    assert report["warning"] is None
    assert "Attached for 2 s" in capsys.readouterr().out


def test_an_unreachable_server_exits_2_naming_it(capsys):
    port = free_port()
    assert attach(f"http://127.0.0.1:{port}", "--kv-events", "tcp://127.0.0.1:1", "--duration", 1) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvscope: error: cannot reach") and str(port) in err and "\n" not in err


def test_an_http_error_exits_2_with_the_status(server, capsys):
    http = server({"/version": (500, b"boom")})
    assert attach(http.url, "--kv-events", "tcp://127.0.0.1:1", "--duration", 1) == 2
    assert "answered HTTP 500" in capsys.readouterr().err


def test_an_exposition_without_vllm_metrics_exits_2(server, capsys):
    routes = vllm_routes(metrics=b"# TYPE other_total counter\nother_total 1.0\n")
    http = server(routes)
    assert attach(http.url, "--kv-events", "tcp://127.0.0.1:1", "--duration", 1) == 2
    assert "has no vllm: metric" in capsys.readouterr().err


def test_a_replay_endpoint_that_is_not_a_publisher_exits_2(server, capsys):
    http, other = server(), server()  # another HTTP server's port: the attached one's own is refused before
    assert attach(http.url, "--kv-events", "tcp://127.0.0.1:1", "--replay", f"tcp://127.0.0.1:{other.port}",
                  "--timeout", 0.3, "--duration", 1) == 2
    err = capsys.readouterr().err
    assert f"replay endpoint tcp://127.0.0.1:{other.port} gave no answer" in err


def test_a_publisher_of_undecodable_frames_exits_2(server, publisher, tmp_path, capsys):
    http, pub = server(), publisher()

    def garbage():
        assert pub.subscribed.wait(WAIT_S)
        pub.send_raw([b"kv", (0).to_bytes(8, "big"), b"\xc1 not msgpack"])

    threading.Thread(target=garbage, daemon=True).start()
    out = tmp_path / "attach.json"
    assert attach(http.url, "--kv-events", pub.endpoint, "--duration", 1, "--json", out) == 2
    assert "could not be decoded" in capsys.readouterr().err
    assert json.loads(out.read_text())["decode_errors"] == 1  # what was observed is still written


def test_silence_without_a_replay_socket_to_vouch_exits_2(server, capsys):
    http = server()
    assert attach(http.url, "--kv-events", f"tcp://127.0.0.1:{free_port()}", "--duration", 0.5) == 2
    assert "no KV event from" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    ([], "give the server's KV event endpoint"),
    (["--kv-events", "tcp://127.0.0.1:1", "--json", "x.json"], "give --duration"),
    (["--kv-events", "tcp://127.0.0.1:1", "--kv-listen", "tcp://*:1"], "not allowed with"),
])
def test_bad_flags_exit_2(flags, message, capsys):
    try:
        code = attach("http://127.0.0.1:1", *flags)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_the_session_frames_carry_the_map_the_points_and_the_log(server, publisher):
    http, pub = server(), publisher()
    session = AttachSession()
    session.handle(APPLY, (AttachTarget(http.url, kv_events=pub.endpoint, replay=pub.replay_endpoint), True))
    first = session.take_frame()
    assert isinstance(first, AttachFrame) and first.error is None
    assert first.info["num_gpu_blocks"] == 12 and first.info["unavailable"]["block tables"]
    assert first.snapshot.num_blocks == 12 and not first.snapshot.count(BLOCK_CACHED)
    play_script(pub)
    frames, deadline = [first], time.monotonic() + WAIT_S
    while time.monotonic() < deadline and session.attachment.subscriber.counts.batches < 26:
        session.advance(0.001)
        frames.append(session.take_frame())
    frames.append(session.take_frame())
    kinds = {kind for frame in frames for kind, _ in frame.log_lines}
    assert {"stored", "removed", "gap", "replayed", "restart"} <= kinds
    snapshot = [f.snapshot for f in frames if f.snapshot is not None][-1]
    assert snapshot.count(BLOCK_CACHED) == cached_after_run1()
    cached = snapshot.block_state == BLOCK_CACHED
    assert (snapshot.block_owner[cached] >= 0).all()  # the chain: one colour per prefix chain
    assert len(first.points) == 1 and first.observed[0].num_running == 0
    session.close()


def test_a_failure_to_attach_is_the_frames_error():
    session = AttachSession()
    session.handle(APPLY, (AttachTarget(f"http://127.0.0.1:{free_port()}", kv_events="tcp://127.0.0.1:1"), True))
    frame = session.take_frame()
    assert "cannot reach" in frame.error and not session.playing


def test_prediction_matches_the_block_count_the_live_server_reported():
    # The live CPU server (vLLM 0.32): 1 GiB of KV cache, 32-token blocks, 16,384 blocks, concurrency
    # 1,024 at 512 tokens. A 2-layer model with 4 KV heads of 64 in 16 bits holds 2,048 bytes a token.
    from kvscope.app.lab.vllm.metrics import parse_metrics

    from attach_fixtures import FIXTURES

    metrics = parse_metrics((FIXTURES / "metrics_live_vllm_cpu_0.32.prom").read_text())
    config = next(iter(metrics.cache_config.values()))
    model = ModelConfig(name="two-layers", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                        head_dim=64, hidden_size=256, intermediate_size=512, vocab_size=1000, weight_dtype="bf16")
    blocks, concurrency = predict(config, "0.32.0", model)
    assert blocks.observed == 16384 and blocks.predicted == 16384 and blocks.error == 0
    assert concurrency.observed == 1024 and concurrency.predicted == pytest.approx(1024)
    doubled = predict(config, "0.32.0", model.replace(num_hidden_layers=4))[0]
    assert doubled.error == pytest.approx(-0.5)


@pytest.mark.parametrize("version, said", [
    ("0.32.0", "m, vLLM 0.32.0 accounting, from"),
    ("0.33.1+cpu", "m, vLLM 0.33.1 accounting, from"),
    ("99.1", "vLLM 0.33 accounting (the newest kvscope models; the server reports 99.1)"),
    ("dev", "vLLM 0.33 accounting (the server's version 'dev' names no release)"),
])
def test_the_prediction_says_when_it_plans_another_release_than_the_servers(version, said):
    """Before: a server reporting 99.1 was planned with 0.33's accounting without a word."""
    config = {"block_size": "32", "num_gpu_blocks": "16384", "kv_cache_memory_bytes": "1073741824"}
    model = ModelConfig(name="m", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=64,
                        hidden_size=256, intermediate_size=512, vocab_size=1000)
    assert said in predict(config, version, model)[0].note


def test_a_forced_block_count_has_no_error_and_no_model_no_prediction():
    config = {"block_size": "32", "num_gpu_blocks": "12", "num_gpu_blocks_override": "12",
              "kv_cache_memory_bytes": "1073741824", "kv_cache_size_tokens": "384", "kv_cache_max_concurrency": "1.5"}
    model = ModelConfig(name="m", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=64,
                        hidden_size=256, intermediate_size=512, vocab_size=1000)
    blocks, concurrency = predict(config, "0.32.0", model)
    assert blocks.error is None and "forced" in blocks.note
    assert concurrency.predicted == pytest.approx(1.5) and concurrency.error == pytest.approx(0)
    assert all(f.predicted is None and "--model" in f.note for f in predict(config, "0.32.0", None))


@pytest.mark.parametrize("flags, words", [
    (["http://[::1:8000", "--kv-events", "tcp://127.0.0.1:1"], "not a valid address (Invalid IPv6 URL)"),
    (["http://127.0.0.1:99999", "--kv-events", "tcp://127.0.0.1:1"], "port '99999' is not a valid port"),
    (["http://127.0.0.1:０", "--kv-events", "tcp://127.0.0.1:1"], "(not ASCII digits) is not a valid port"),
    (["http://u:p@127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1"], "holds credentials"),
    (["http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:0"], "KV event endpoint 'tcp://127.0.0.1:0': port '0'"),
    (["http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1", "--replay", "tcp://127.0.0.1:-1"],
     "replay endpoint 'tcp://127.0.0.1:-1': port '-1' is not a valid port"),
    (["http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:65500", "--data-parallel-size", "64"],
     "DP rank 36 would use port 65536, past 65535"),
])
def test_addresses_and_ports_that_cannot_be_are_refused_before_anything_is_sent(flags, words, capsys):
    # refused as what they are, not as "connection refused" or "no such host" after trying
    assert attach(*flags, "--duration", 1) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "cannot reach" not in err


@pytest.mark.parametrize("flags", [["--screenshot", "s.png"], ["--quit-after", "1"], ["--theme", "light"]])
def test_window_flags_are_refused_when_headless(flags, tmp_path, capsys):
    assert attach("http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1", "--duration", 1, *flags) == 2
    err = capsys.readouterr().err
    assert f"{flags[0]} is the window's, and --duration attaches headless" in err and err.count("\n") == 1


def test_a_screenshot_without_quit_after_is_refused_for_the_window(capsys):
    assert attach("http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1", "--screenshot", "s.png") == 2
    assert "--screenshot s.png: needs --quit-after SECONDS" in capsys.readouterr().err


def pressure_metrics_with(value: str) -> bytes:
    from attach_fixtures import PRESSURE_METRICS

    return PRESSURE_METRICS.replace(b'num_gpu_blocks="12"', f'num_gpu_blocks="{value}"'.encode())


@pytest.mark.parametrize("value, words", [
    ("²", "num_gpu_blocks='²', which is not valid; kvscope reads a whole number from 1 to 4,194,304"),
    ("0", "num_gpu_blocks='0', which is not valid"),
    ("-12", "num_gpu_blocks='-12', which is not valid"),
    ("12.5", "num_gpu_blocks='12.5', which is not valid"),
    ("NaN", "num_gpu_blocks='NaN', which is not valid"),
    ("4194305", "num_gpu_blocks='4194305', more than 4,194,304, the most blocks kvscope draws"),
])
def test_a_block_count_that_is_not_one_or_past_the_pool_ceiling_exits_2(value, words, server, capsys):
    http = server(vllm_routes(metrics=pressure_metrics_with(value)))
    assert attach(http.url, "--kv-events", f"tcp://127.0.0.1:{free_port()}", "--duration", 0.3) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "has no vllm:cache_config_info" not in err


def test_out_of_range_metrics_are_ignored_with_a_warning_and_the_json_holds_no_nan(server, publisher, tmp_path,
                                                                                      capsys):
    from test_vllm_metrics import replace_samples

    from attach_fixtures import PRESSURE_METRICS

    metrics = replace_samples(PRESSURE_METRICS.decode(), {
        "vllm:kv_cache_usage_perc": "-1e308", "vllm:num_requests_running": "+Inf",
        "vllm:prefix_cache_queries_total": "-1e308", "vllm:time_to_first_token_seconds_sum": "NaN"})
    http, pub = server(vllm_routes(metrics=metrics.encode())), publisher()
    play_script(pub)
    out = tmp_path / "attach.json"
    assert attach(http.url, "--kv-events", pub.endpoint, "--replay", pub.replay_endpoint, "--duration", 1,
                  "--json", out) == 0

    def no_constant(name):
        raise AssertionError(f"{name} is not JSON")

    report = json.loads(out.read_text(), parse_constant=no_constant)
    m = report["metrics"]
    assert m["kv_usage"] is None and m["peak_kv_usage"] is None and m["num_running"] is None
    assert m["prefix_cache_hit_rate"] is None  # not 1.0 from -1e308 / -1e308
    err = capsys.readouterr().err
    warning, = [line for line in err.splitlines() if line.startswith("kvscope: warning:")]
    assert "out of range, ignored" in warning and "vllm:kv_cache_usage_perc -1e+308" in warning
    assert report["warnings"] == [warning.removeprefix("kvscope: warning: ")]


def test_more_blocks_than_the_server_has_are_flagged_not_reported_as_true(server, publisher, tmp_path, capsys):
    import msgspec

    http, pub = server(), publisher()  # the server reports 12 blocks

    def script():
        assert pub.subscribed.wait(WAIT_S)
        for seq in range(3):
            hashes = list(range(1000 * seq + 1, 1000 * seq + 11))  # 10 new blocks each: 30 on 12
            event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
                     "token_ids": [1] * 320, "block_size": 32}
            pub.publish(seq, msgspec.msgpack.encode([1.0 + seq, [event], 0]))

    threading.Thread(target=script, daemon=True).start()
    out = tmp_path / "attach.json"
    assert attach(http.url, "--kv-events", pub.endpoint, "--replay", pub.replay_endpoint, "--duration", 1,
                  "--json", out) == 0
    report = json.loads(out.read_text())
    assert report["blocks_unplaced"] == 18
    warning, = report["warnings"]
    assert "more distinct blocks than the server's num_gpu_blocks (12 per engine)" in warning
    assert "18 block(s) beyond the pool" in warning
    captured = capsys.readouterr()
    assert captured.err.count("kvscope: warning:") == 1
    assert "(inconsistent: 18 beyond the server's 12-block pool)" in captured.out
