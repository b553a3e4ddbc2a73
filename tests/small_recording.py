"""The small recorded run the export and replay tests read: a simulated llama-3-8b on an H100,
squeezed to 40 blocks so that it has prefix hits and preemptions to show; and a recording with one
record's array forged (checksums right), for the readers' refusals."""

import numpy as np

from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.recording import RunRecorder
from kvscope.app.lab.recording.format import (FILE_HEADER, FRAME, INDEX, decode_payload, encode_payload, frame_record,
                                              inflate)
from kvscope.app.lab.workload import LengthDist, WorkloadSpec, generate_requests
from kvscope.engine import Engine, EngineArgs


def record_small_run(path):
    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"),
                    EngineArgs(num_gpu_blocks_override=40, max_model_len=600))
    spec = WorkloadSpec(name="small", num_requests=30, arrival_rate_per_s=200.0,
                        prompt_tokens=LengthDist("lognormal", median=120, sigma=0.6, min=2, max=300),
                        output_tokens=LengthDist("lognormal", median=40, sigma=0.8, min=1, max=200),
                        shared_prefix_fraction=0.6, shared_prefix_tokens=48, num_shared_prefixes=2)
    engine.add_workload(generate_requests(spec, engine.model.vocab_size, seed=3))
    recorder = RunRecorder(engine, path, {"label": "small run", "workload": spec}, keyframe_interval=64)
    while (result := engine.step()) is not None:
        recorder.record_step(result)
    recorder.close(engine.summary())
    return path


def forged_record(data: bytes, record_type: int, nth: int, name: str, change) -> bytes:
    """The recording with array `name` of its nth record of record_type changed (checksums right),
    its index and trailer dropped: the reader scans it, as a file whose writer was killed."""
    offset, found = FILE_HEADER.size, []
    while offset + FRAME.size <= len(data):
        _, kind, flags, length, _, _ = FRAME.unpack_from(data, offset)
        found.append((offset, kind, flags, length))
        offset += FRAME.size + length
    offset, kind, flags, length = [r for r in found if r[1] == record_type][nth]
    stored = data[offset + FRAME.size:offset + FRAME.size + length]
    head, arrays = decode_payload(inflate(stored, "x") if flags & 1 else stored, "x")
    arrays = {k: np.array(v) for k, v in arrays.items()}
    arrays[name] = change(arrays[name].astype(np.float64) if arrays[name].dtype.kind == "f" else arrays[name])
    head.pop("arrays")
    end = next(r[0] for r in found if r[1] == INDEX)
    return (data[:offset] + frame_record(kind, encode_payload(head, arrays), bool(flags & 1))
            + data[offset + FRAME.size + length:end])
