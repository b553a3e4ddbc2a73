"""What the hostile passes' cases share, for scripts/hostile_inputs*.py: the fixtures that several
passes build (a small random-weight model folder, this machine's calibration key) and a vLLM
look-alike on loopback (an HTTP server on a thread answering fixed routes, a ZMQ publisher of KV
event batches), each served by threads of the harness's own process for the whole run."""

from __future__ import annotations

import threading
import time
from pathlib import Path

PRESETS = Path(__file__).resolve().parent.parent / "presets"
# What an accepted file must not print: Python's own words where kvscope's message belongs
PYTHON_WORDS = ("Traceback", "object has no attribute", "NoneType", "nan %")


def cpu_calibration_key() -> str | None:
    """This machine's key for calibration profiles; None (said) where it cannot be made."""
    try:
        from kvscope.app.lab.this_machine import this_machine_key

        return this_machine_key(use_cuda=False)
    except Exception as exc:  # noqa: BLE001 - a machine whose key cannot be made runs the other cases
        print(f"(no calibration profile cases: {exc})")
        return None


def hostile_model(folder: Path) -> Path:
    """A 2-layer random-weight model folder (fp32, 512 ids): the good model the model-folder cases break."""
    from kvscope.app.lab.verify.tiny_model import build_random_model
    from kvscope.engine.config import ModelConfig

    shape = ModelConfig(name="hostile", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                        max_position_embeddings=512, weight_dtype="fp32")
    return build_random_model(shape, folder)


def stored(hashes, **fields) -> dict:
    """A vLLM BlockStored event of 32-token blocks."""
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
            "token_ids": list(range(32 * len(hashes))), "block_size": 32, **fields}


def zmq_publisher(context, messages) -> str:
    """A ZMQ XPUB on loopback that sends messages() (lists of frames) to each subscriber as it
    subscribes: the attach cases' fake vLLM KV-event stream. Its endpoint."""
    import zmq

    socket = context.socket(zmq.XPUB)
    socket.setsockopt(zmq.SNDHWM, 0)
    port = socket.bind_to_random_port("tcp://127.0.0.1")

    def loop():
        while True:
            try:
                message = socket.recv()
            except zmq.ZMQError:
                return
            if message[:1] == b"\x01":  # a subscription: a subscriber is there
                time.sleep(0.1)
                for frames in messages():
                    socket.send_multipart(frames)

    threading.Thread(target=loop, daemon=True).start()
    return f"tcp://127.0.0.1:{port}"


def fake_http_server(routes: dict) -> str:
    """A loopback HTTP server on a thread answering GET path -> bytes (or a callable that answers
    itself); the attach cases' fake vLLM. Its address."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 - http.server's name
            body = routes.get(self.path)
            if callable(body):
                body(self)
                return
            self.send_response(200 if body is not None else 404)
            body = body if body is not None else b"not found"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


# A 4-layer Llama-shaped config.json, the one the config.json cases of several passes change a field or two of
SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
               "vocab_size": 1000, "max_position_embeddings": 512}


def config_json_cases(folder: Path, Case, write, base: dict, configs: list, prefix: str = "", extra=None) -> list:
    """`math --config` on each (what, fields over base, what the refusal must say; None: accepted) of configs,
    written as folder/configs/c<i>/config.json; extra(fields): more arguments for that one."""
    import json

    cases = []
    for i, (what, fields, said) in enumerate(configs):
        path = write(folder / "configs" / f"c{i}" / "config.json", json.dumps({**base, **fields}))
        more = extra(fields) if extra else []
        cases.append(Case(f"{prefix}math --config with {what}", "structure", ["math", "--config", str(path), *more],
                          expect="refuse" if said else "ok", must_say=(str(path), *said) if said else (),
                          must_not_say=PYTHON_WORDS))
    return cases


def config_shape_cases(folder: Path, Case, write, shapes: list, prefix: str = "") -> list:
    """`math --config` on each (what, its config.json, what math must print) of shapes, written as
    folder/shapes/s<i>/config.json: real files read, and the shape or size they must be read as."""
    import json

    cases = []
    for i, (what, cfg, said) in enumerate(shapes):
        path = write(folder / "shapes" / f"s{i}" / "config.json", json.dumps(cfg))
        cases.append(Case(f"{prefix}math --config of {what}", "structure", ["math", "--config", str(path)],
                          expect="ok", must_say=(said,), must_not_say=PYTHON_WORDS))
    return cases


def model_variant(good: Path, folder: Path, write, files: dict) -> Path:
    """A copy of the good model folder (hostile_model) with these files (name -> text) written into it, and a
    word-level tokenizer of 100 ids (<eos> 0, w1 to w98, [UNK] 99) as its tokenizer.json."""
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers

    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(good, folder)
    vocab = {"<eos>": 0, **{f"w{i}": i for i in range(1, 99)}, "[UNK]": 99}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    for name, text in {"tokenizer.json": tokenizer.to_str(), **files}.items():
        write(folder / name, text)
    return folder


def pass_cases(folder: Path, makers: tuple, Case, write) -> list:
    """The cases of a pass's makers (each make(folder, Case, write) -> cases), their fixtures under folder."""
    folder.mkdir(parents=True, exist_ok=True)
    return [case for make in makers for case in make(folder, Case, write)]
