"""The window's live engine process (a SessionHost running an EngineSession) without the window:
the default run (real backend, tiny-llama, Azure trace, 64 MiB KV budget) in a spawned process on
this machine's GPU or CPU, played for a few seconds, frames taken as the window takes them, the
run recorded to a .kvrec and read back.
For a CUDA machine with no display (scripts/gpu_check.sh runs it): python scripts/engine_process_check.py OUTDIR
"""

import sys
import time
from pathlib import Path
from types import SimpleNamespace


def main(out: Path, seconds: float = 8.0) -> int:
    from kvscope.app.host.process_host import SessionHost
    from kvscope.app.host.session import EngineSession
    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui.run_settings import build_run_config
    from kvscope.app.lab.recording import Recording

    args = SimpleNamespace(backend=None, model=None, hardware=None, workload=None, model_path=None)
    config = build_run_config(initial_values(args))
    out.mkdir(parents=True, exist_ok=True)
    recording = out / "engine-process.kvrec"
    worker = SessionHost(EngineSession)
    worker.start()
    worker.set_speed(0.0)
    worker.apply(config, play=True)
    started = time.perf_counter()
    info = snapshot = None
    frames = 0
    recording_started = False
    while time.perf_counter() - started < 120 + seconds:
        frame = worker.take_frame()
        time.sleep(1 / 60)
        if frame is None:
            continue
        frames += 1
        if frame.error:
            print("engine error:", frame.error)
            return 1
        info = frame.engine_info or info
        snapshot = frame.snapshot if frame.snapshot is not None else snapshot
        if info is not None and not recording_started:
            worker.start_recording(str(recording))
            recording_started, playing_since, frames = True, time.perf_counter(), 0
        if recording_started and time.perf_counter() - playing_since > seconds:
            break
    worker.stop_recording()
    time.sleep(1.0)
    worker.stop()
    if info is None or snapshot is None:
        print("no engine was built in time")
        return 1
    rec = Recording.open(recording)
    print(f"engine: {info.label}, {info.plan.num_blocks:,} blocks, KV tensors {info.kv_tensor_bytes or 0:,} B")
    print(f"{frames} frames in {seconds:.0f} s ({frames / seconds:.1f} a second); last snapshot: step {snapshot.step:,}, "
          f"{snapshot.num_running} running, KV {snapshot.kv_usage:.1%}")
    print(f"recording: {rec.num_steps:,} steps, {rec.file_size / 2**20:.2f} MiB, closed={rec.closed}, "
          f"delta mismatches {rec.delta_mismatches}")
    return 0 if rec.num_steps > 0 and rec.closed and snapshot.step > 0 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "engine-process-check")))
