"""The fifth hostile pass over the files and servers kvscope reads (scripts/hostile_inputs_fifth_files.py):
whole numbers past 64 bits in TOML and JSON, texts holding newlines or escape codes that reached the
terminal, recordings kvscope wrote and then called corrupt, forged recordings whose checksums are
right, safetensors whose dtypes lie, and server answers a check let through to a traceback."""

from __future__ import annotations

import json
import struct
import zlib

import msgspec
import pytest

from cli_helper import cli
from test_files_hostile_fourth import _records
from kvscope.app.lab.bounded_reads import escaped, outsized_whole, read_capped
from kvscope.app.lab.calibration import profile_path, read_profile
from kvscope.app.lab.models.loader import check_model_directory
from kvscope.app.lab.presets import read_toml
from kvscope.app.lab.recording import Recording, RecordingError
from kvscope.app.lab.recording.format import (FILE_HEADER, FRAME, INDEX, STEPS, TRAILER_TAG,
                                              decode_payload, frame_record, inflate)
from kvscope.app.lab.this_machine import cpu_machine_key
from kvscope.app.lab.vllm.events import KvEventDecodeError, decode_batch
from kvscope.app.lab.vllm.metrics import MetricsError, ServerUnreachable, fetch_version, parse_metrics, server_url
from kvscope.app.lab.vllm.prediction import observed_max_model_len, predict
from kvscope.app.lab.vllm.server import probe_server, served_models
from kvscope.app.lab.presets import load_model
from kvscope.app.lab.workload import workload_from_dict
from kvscope.engine.config import ConfigError

BIG = 10**400  # spelled by TOML and JSON; no float holds it
ESC = "\x1b[2J"

# -- whole numbers past 64 bits ---------------------------------------------------------------------------


def test_outsized_whole_numbers_are_found_where_they_nest():
    assert outsized_whole({"a": [1, {"b": BIG}]}) == ("a.1.b", BIG)
    assert outsized_whole({"a": 2**63 - 1, "b": -(2**63), "c": True, "d": 1e308}) is None


@pytest.mark.parametrize("text, where", [
    (f'name = "w"\narrival_rate_per_s = {BIG}\n', "arrival_rate_per_s"),
    (f'name = "w"\nprompt_tokens = {{ dist = "lognormal", median = {BIG}, sigma = 1 }}\n', "prompt_tokens.median"),
    (f"memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = -{BIG}\n", "memory_bandwidth_bytes_per_s"),
])
def test_a_toml_whole_number_past_64_bits_is_refused_naming_it(tmp_path, text, where):
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"{where} is a whole number of 401 digits"):
        read_toml(path, "preset x")


def test_the_cli_refuses_a_workload_rate_past_64_bits_in_one_line(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "presets" / "workloads"
    folder.mkdir(parents=True)
    (folder / "big.toml").write_text(f'name = "w"\narrival_rate_per_s = {BIG}\n')
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    rc, _, err = cli(capsys, "run", "--quiet", "--workload", "big", "--requests", "2")
    assert rc == 2 and err.startswith("kvscope: error:") and "arrival_rate_per_s" in err, err


def test_a_calibration_profile_number_past_64_bits_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    path = profile_path(cpu_machine_key())
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "kvscope-calibration", "version": 1, '
                    f'"calibration": {{"label": "x", "flops_efficiency": {BIG}}}}}')
    with pytest.raises(ConfigError, match="calibration.flops_efficiency is a whole number of 401 digits"):
        read_profile(path)


# -- paths and names ---------------------------------------------------------------------------------------


def test_a_path_holding_a_nul_is_a_config_error():
    with pytest.raises(ConfigError, match="NUL"):
        read_capped("a\0b", "trace x", 100)


@pytest.mark.parametrize("data, says", [
    ({"name": "w", "trace": "a\0b.csv"}, "NUL"),
    ({"name": f"w{ESC}"}, "printable"),
    ({"name": "w", "description": "a\nb"}, "printable"),
])
def test_a_workload_file_with_a_nul_path_or_a_name_not_one_line_is_refused(data, says):
    with pytest.raises(ConfigError, match=says):
        workload_from_dict(data, "workload preset w")


def test_escaped_writes_what_is_not_printable_as_its_escape():
    assert escaped("plain é") == "plain é"
    assert escaped(f"a\n{ESC}") == "a\\n\\x1b[2J"


# -- recordings --------------------------------------------------------------------------------------------


def _payload(data: bytes, number: int) -> bytes:
    offset, _, flags, length = _records(data)[number]
    raw = data[offset + FRAME.size: offset + FRAME.size + length]
    return inflate(raw, "x") if flags & 1 else raw


def _changed(payload: bytes, change) -> bytes:
    (n,) = struct.unpack_from("<I", payload)
    head = json.loads(payload[4:4 + n])
    change(head)
    text = json.dumps(head).encode()
    return struct.pack("<I", len(text)) + text + payload[4 + n:]


def _with_header(data: bytes, change) -> bytes:
    """The recording cut before its index (the reader scans it) with the header's JSON changed."""
    records = _records(data)
    end = next(r[0] for r in records if r[1] == INDEX)
    first, second = records[0][0], records[1][0]
    return data[:first] + frame_record(records[0][1], _changed(_payload(data, 0), change), False) + data[second:end]


def _with_index(data: bytes, change) -> bytes:
    records = _records(data)
    number = next(i for i, r in enumerate(records) if r[1] == INDEX)
    offset = records[number][0]
    trailer = struct.pack("<Q8s", offset, TRAILER_TAG)
    return (data[:offset] + frame_record(INDEX, _changed(_payload(data, number), change), True) + trailer
            + struct.pack("<I", zlib.crc32(trailer)))


def _open(tmp_path, blob: bytes) -> Recording:
    path = tmp_path / "forged.kvrec"
    path.write_bytes(blob)
    return Recording.open(path, allow_truncated=True)


@pytest.mark.parametrize("change, says", [
    (lambda h: (h.pop("label", None), h["model"].update(name=5)), "model.name must be text"),
    (lambda h: h["plan"].update(block_bytes=BIG), "plan.block_bytes"),
    (lambda h: h["hardware"].update(memory_bandwidth_bytes_per_s=BIG), "past the 64-bit range"),
])
def test_a_header_export_could_not_show_is_refused_as_corrupt(tmp_path, recording_bytes, capsys, change, says):
    blob = _with_header(recording_bytes, change)
    with pytest.raises(RecordingError, match=says):
        _open(tmp_path, blob)
    rc, _, err = cli(capsys, "export", tmp_path / "forged.kvrec")
    assert rc == 2 and "Traceback" not in err and says in err, err


def test_header_texts_and_the_note_are_shown_escaped(tmp_path, recording_bytes, capsys):
    blob = _with_index(recording_bytes, lambda h: h.update(note=f"done\n{ESC}"))
    with _open(tmp_path, blob) as recording:
        assert recording.note == "done\\n\\x1b[2J"
    path = tmp_path / "label.kvrec"
    path.write_bytes(_with_header(recording_bytes, lambda h: h.update(label=f"run{ESC}")))
    rc, out, _ = cli(capsys, "export", path)
    assert rc == 0 and "\x1b" not in out and "run\\x1b[2J" in out


def test_a_note_that_is_not_text_and_a_missing_format_version(tmp_path, recording_bytes, capsys):
    with pytest.raises(RecordingError, match="note must be text"):
        _open(tmp_path, _with_index(recording_bytes, lambda h: h.update(note=["a", 1])))
    file_version = list(FILE_HEADER.unpack_from(recording_bytes)[1:])
    with _open(tmp_path, _with_header(recording_bytes, lambda h: h.pop("format_version"))) as recording:
        assert recording.header["format_version"] == file_version  # `export` reads it


@pytest.mark.parametrize("dtype", ["<i4,", "(1000000000)<i4", {"names": ["a"], "formats": ["<i4"]}, "|O", "<c8"])
def test_an_array_dtype_not_a_numbers_is_refused_before_numpy_parses_it(recording_bytes, dtype):
    number = next(i for i, r in enumerate(_records(recording_bytes)) if r[1] == STEPS)

    def change(head):
        next(iter(head["arrays"].values()))["dtype"] = dtype

    with pytest.raises(RecordingError, match="has dtype"):
        decode_payload(_changed(_payload(recording_bytes, number), change), "steps")


# -- model folders -------------------------------------------------------------------------------------------


def _model_folder(tmp_path, dtype: str, quantized: bool = False):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
              "num_attention_heads": 1, "hidden_size": 4, "vocab_size": 8}
    if quantized:
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    head = json.dumps({"__metadata__": {"format": "pt"},
                       "model.embed_tokens.weight": {"dtype": dtype, "shape": [8, 4], "data_offsets": [0, 128]}})
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head.encode() + bytes(128))
    return tmp_path


def test_float_weights_stored_as_whole_numbers_are_refused_naming_the_tensor(tmp_path):
    with pytest.raises(ConfigError, match="model.embed_tokens.weight' is stored as I32"):
        check_model_directory(_model_folder(tmp_path, "I32"))


@pytest.mark.parametrize("dtype, quantized", [("F32", False), ("I32", True)])
def test_float_weights_and_a_quantised_checkpoints_integers_pass(tmp_path, dtype, quantized):
    check_model_directory(_model_folder(tmp_path, dtype, quantized))


def test_a_buffer_of_whole_numbers_beside_float_weights_passes(tmp_path):
    """Older checkpoints keep buffers beside the parameters (GPT-NeoX's boolean attention.bias mask):
    only a parameter (a .weight) stored as whole numbers is refused."""
    folder = _model_folder(tmp_path, "F32")
    head = json.dumps({"__metadata__": {"format": "pt"},
                       "model.embed_tokens.weight": {"dtype": "F32", "shape": [8, 4], "data_offsets": [0, 128]},
                       "model.layers.0.attention.bias": {"dtype": "BOOL", "shape": [4, 4], "data_offsets": [128, 144]}})
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head.encode() + bytes(144))
    check_model_directory(folder)


# -- a vLLM server's answers -----------------------------------------------------------------------------------


def _routes(**changes):
    from attach_fixtures import vllm_routes

    return {**vllm_routes(), **changes}


@pytest.mark.parametrize("version", [f"0.32.0\n{ESC}", "0.32.0+" + "g" * 5000, ""])
def test_a_version_that_is_not_one_short_printable_line_is_refused(server, version):
    http = server(_routes(**{"/version": (200, json.dumps({"version": version}).encode())}))
    with pytest.raises(MetricsError, match="printable"):
        fetch_version(http.url)


def test_model_names_not_one_printable_line_are_passed_over(server):
    models = json.dumps({"data": [{"id": f"tiny{ESC}"}]}).encode()
    http = server(_routes(**{"/v1/models": (200, models)}))
    assert served_models(http.url) == ()
    info, _ = probe_server(http.url)
    assert info.model_names == ("tiny",)  # the metrics' label
    loras = json.dumps({"data": [{"id": f"lora-{i}"} for i in range(300)]}).encode()
    assert len(served_models(server(_routes(**{"/v1/models": (200, loras)})).url)) == 300


def test_a_metrics_model_name_with_escapes_is_not_a_model_name_and_rejected_labels_are_escaped():
    from attach_fixtures import PRESSURE_METRICS

    text = PRESSURE_METRICS.decode().replace('model_name="tiny"', 'model_name="tiny\\n\x1b[2J"')
    text += 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 5\n'
    text += 'vllm:time_to_first_token_seconds_bucket{engine="0",le="\x1b[2J",model_name="tiny"} 1\n'
    metrics = parse_metrics(text)
    assert metrics.model_names == ("tiny",)  # the added samples' label; the escaped one is passed over
    assert metrics.rejected and not any("\x1b" in r for r in metrics.rejected), metrics.rejected


def test_an_address_longer_than_a_recording_keeps_is_refused():
    with pytest.raises(ServerUnreachable, match="an address of 3,022 characters"):
        server_url("http://127.0.0.1:8000/" + "a" * 3000)


def test_an_http_reason_phrase_is_quoted_escaped():
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(503, f"Unavailable{ESC}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ServerUnreachable) as caught:
            fetch_version(f"http://127.0.0.1:{httpd.server_address[1]}")
        assert "503" in str(caught.value) and "\x1b" not in str(caught.value)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("labels", [{"kv_cache_memory_bytes": "inf"}, {"kv_cache_memory_bytes": "1e999"},
                                    {"kv_cache_size_tokens": "inf", "kv_cache_max_concurrency": "1"},
                                    {"kv_cache_size_tokens": "384", "kv_cache_max_concurrency": "1e-300"},
                                    {"num_gpu_blocks_override": "nan"}])
def test_cache_config_labels_that_are_no_finite_number_are_not_read(labels):
    cache_config = {"block_size": "16", "num_gpu_blocks": "12", "kv_cache_memory_bytes": "1073741824",
                    "kv_cache_size_tokens": "384", "kv_cache_max_concurrency": "1.5", **labels}
    figures = predict(cache_config, "0.32.0", load_model("tiny-llama"))
    assert all(f.error is None or abs(f.error) < 1e6 for f in figures)
    assert observed_max_model_len(cache_config) in (None, 256)


def test_a_kv_event_string_that_is_not_utf8_is_a_decode_error():
    encode = msgspec.msgpack.encode
    event = (b"\x83" + encode("type") + encode("BlockStored") + encode("block_hashes") + b"\x91\x01"
             + encode("medium") + b"\xa2\xff\xfe")
    with pytest.raises(KvEventDecodeError):
        decode_batch(b"\x92\xcb" + struct.pack(">d", 1.0) + b"\x91" + event)


def test_an_attached_recording_of_300_adapters_and_256_engines_reads_back(server, publisher, tmp_path, capsys):
    from test_vllm_subscriber import RUN1

    from kvscope.app.cli.attach import follow
    from kvscope.app.lab.recording.attached_reader import AttachedRecording
    from kvscope.app.lab.vllm.attachment import AttachTarget
    from attach_fixtures import PRESSURE_METRICS

    running = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} 1\n' for i in range(256))
    loras = json.dumps({"data": [{"id": f"lora-{i}"} for i in range(300)]}).encode()
    http = server(_routes(**{"/metrics": (200, PRESSURE_METRICS + running.encode()), "/v1/models": (200, loras)}))
    pub = publisher()

    def publish():
        assert pub.subscribed.wait(10)
        for seq, payload in enumerate(RUN1[:2]):
            pub.publish(seq, payload)

    import threading

    threading.Thread(target=publish, daemon=True).start()
    path = tmp_path / "many.kvrec"
    # 256 engines, the most kvscope follows, as 256 ranks (fewer is refused: their events would be missing)
    follow(AttachTarget(http.url, kv_events=pub.endpoint, data_parallel_size=256), 1.0, record=str(path))
    recording = AttachedRecording.open(path)
    assert len(recording.info["model_names"]) == 300 and len(recording.info["engines"]) == 256
    rc, out, err = cli(capsys, "export", path)
    assert rc == 0 and "lora-299" in out, err


def test_a_server_of_more_engines_than_kvscope_follows_says_the_most_it_follows(server, publisher):
    """300 DP engines: "give --data-parallel-size 300" named a size the flag refuses (1 to 256)."""
    from kvscope.app.cli.attach import follow
    from kvscope.app.lab.vllm.attachment import AttachTarget
    from attach_fixtures import PRESSURE_METRICS

    running = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} 1\n' for i in range(300))
    http = server(_routes(**{"/metrics": (200, PRESSURE_METRICS + running.encode())}))
    with pytest.raises(ConfigError, match=r"names 300 DP engines .*: kvscope follows at most 256"):
        follow(AttachTarget(http.url, kv_events=publisher().endpoint), 1.0)


def test_an_event_tag_that_is_no_name_is_not_quoted_and_unknown_names_are_kept_short():
    encode = msgspec.msgpack.encode

    def batch(event) -> bytes:
        return b"\x92\xcb" + struct.pack(">d", 1.0) + b"\x91" + encode(event)

    with pytest.raises(KvEventDecodeError) as caught:
        decode_batch(batch([list(range(2000)), 1]))
    assert len(str(caught.value)) < 400  # a recorded notice: the reader takes 4,000 characters
    (event,) = decode_batch(batch({"type": "X" * 100_000})).events
    assert len(event.type_name) <= 203


def test_a_notice_longer_than_the_reader_takes_is_recorded_cut():
    from kvscope.app.lab.recording.attached_writer import _kept
    from kvscope.app.lab.recording.schema import MAX_NOTICE_TEXT

    assert _kept("x" * 10_000) == "x" * (MAX_NOTICE_TEXT - 3) + "..." and _kept("short") == "short"


@pytest.mark.parametrize("value, said", [(10**400, "at most"), (-(10**400), "0 or more")])
def test_a_whole_number_past_any_float_is_refused_by_the_bound_it_crosses(value, said):
    """The engine's own check, beneath the files' boundaries: math.isfinite(10**400) raised OverflowError."""
    from kvscope.engine.checks import real_number

    with pytest.raises(ConfigError, match=said):
        real_number(value, "arrival_rate_per_s")


def test_a_subscriber_whose_topic_cannot_be_set_fails_at_once_instead_of_hanging_in_close():
    """A topic of bytes that are not UTF-8 raised inside the socket's set-up; the socket was never
    closed and the subscriber's close() waited for it for ever (the CLI refuses such topics first)."""
    import threading

    from kvscope.app.lab.vllm.endpoints import PublisherEndpoint
    from kvscope.app.lab.vllm.subscriber import KvEventSubscriber

    outcome = []

    def subscribe():
        try:
            KvEventSubscriber([PublisherEndpoint("tcp://127.0.0.1:1")], topic="kv\udcff")
        except UnicodeEncodeError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=subscribe, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and outcome


def test_a_calibration_profile_whose_version_is_true_is_refused(tmp_path):
    """JSON's true is Python's True, which equals 1: the profile was read as version 1."""
    import kvscope.app.lab.calibration as calibration

    path = tmp_path / "profile.json"
    profile = {"format": calibration.PROFILE_FORMAT, "version": True}
    path.write_text(json.dumps(profile))
    with pytest.raises(ConfigError, match="version True is not"):
        read_profile(path)


def test_a_model_path_that_is_a_pipe_is_not_called_missing(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a directory"):
        check_model_directory(fifo)


def test_a_server_redirect_is_followed_to_http_and_https_only():
    """urllib's own handler followed a /metrics redirect to ftp://, opening a connection to a host
    the user never named."""
    import urllib.error
    import urllib.request

    from kvscope.app.lab.vllm.http_redirects import HttpOnlyRedirects

    handler = HttpOnlyRedirects()
    request = urllib.request.Request("http://127.0.0.1:8000/metrics")
    for target in ("ftp://example.com/metrics", "file:///etc/passwd"):
        with pytest.raises(urllib.error.HTTPError, match="does not follow"):
            handler.redirect_request(request, None, 302, "Found", {}, target)
    followed = handler.redirect_request(request, None, 302, "Found", {}, "http://127.0.0.1:8000/metrics/")
    assert followed.full_url == "http://127.0.0.1:8000/metrics/"


def test_a_utf16_trace_is_named_utf16_not_binary(tmp_path):
    from kvscope.app.lab.workload import read_trace

    path = tmp_path / "u16.csv"
    path.write_bytes("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n".encode("utf-16"))
    with pytest.raises(ConfigError, match="UTF-16 text; save it as CSV in UTF-8"):
        read_trace(path)
