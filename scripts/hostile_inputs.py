"""Bad input, tried as a hostile user would: every case runs the real `kvscope` command in a
subprocess (a time limit, an address-space limit) and is judged by what a user sees.

    python scripts/hostile_inputs.py [--only SUBSTRING] [--verbose] [--json OUT]

A case is clean when it ends as expected: a refusal is exit code 2 with one `kvscope ... error`
line last on stderr and no traceback; an accepted input is exit code 0. Otherwise it is a
traceback (or a crash), a hang (past the time limit), a wrong outcome (nonsense accepted, a
refusal that names the wrong cause) or a lost file (a file the command was not asked to write
changed). The fixtures (traces, presets, config.json files, model folders, recordings) are made
in a temporary folder first; a small random-weight model is built there for the model-folder cases.
The cases are data, one module per pass and kind (hostile_inputs_first_cli.py, ..._eighth_files.py),
each case beside its fixture; this file runs and judges them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostile_case import ROOT, Case, write
from hostile_inputs_first_cli import file_cases, number_cases
from hostile_inputs_first_files import config_cases, model_folder_cases, preset_cases, recording_cases, trace_cases
from hostile_inputs_third import third_pass_cases
from hostile_inputs_fourth_cli import fourth_cli_cases
from hostile_inputs_fourth_files import fourth_file_cases
from hostile_inputs_fifth_cli import fifth_cli_cases
from hostile_inputs_fifth_files import fifth_file_cases
from hostile_inputs_sixth_cli import sixth_cli_cases
from hostile_inputs_sixth_files import sixth_file_cases
from hostile_inputs_seventh_cli import seventh_cli_cases
from hostile_inputs_seventh_files import seventh_file_cases
from hostile_inputs_eighth_cli import eighth_cli_cases
from hostile_inputs_eighth_files import eighth_file_cases
from hostile_inputs_ninth_cli import ninth_cli_cases
from hostile_inputs_ninth_files import ninth_file_cases
from hostile_inputs_tenth_cli import tenth_cli_cases
from hostile_inputs_tenth_files import tenth_file_cases
from hostile_inputs_eleventh_cli import eleventh_cli_cases
from hostile_inputs_eleventh_files import eleventh_file_cases
from hostile_inputs_twelfth_cli import twelfth_cli_cases
from hostile_inputs_twelfth_files import twelfth_file_cases
from hostile_inputs_thirteenth_cli import thirteenth_cli_cases
from hostile_inputs_thirteenth_files import thirteenth_file_cases
from hostile_inputs_fourteenth_cli import fourteenth_cli_cases
from hostile_inputs_fourteenth_files import fourteenth_file_cases
from hostile_inputs_fifteenth_files import fifteenth_file_cases
from hostile_inputs_fifteenth_cli import fifteenth_cli_cases
from hostile_inputs_sixteenth_cli import sixteenth_cli_cases
from hostile_inputs_seventeenth_files import seventeenth_file_cases
from hostile_inputs_seventeenth_cli import seventeenth_cli_cases
from hostile_inputs_eighteenth_files import eighteenth_file_cases
from hostile_inputs_eighteenth_cli import eighteenth_cli_cases
from hostile_inputs_nineteenth_files import nineteenth_file_cases
from hostile_inputs_nineteenth_cli import nineteenth_cli_cases

KVSCOPE = ROOT / ".venv" / "bin" / "kvscope"
TIME_LIMIT_S = 10.0  # a refusal or a tiny run takes a second or two; past this a case hangs
SLOW_TIME_LIMIT_S = 60.0  # cases that load a model with torch (real backend, verify)
MEMORY_LIMIT_BYTES = 6 * 1024**3


# -- running -----------------------------------------------------------------------------------


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def judge(case: Case, rc, out: str, err: str, elapsed: float, changed: list) -> tuple[str, str]:
    """(outcome, detail): clean | traceback | hang | wrong | file lost."""
    if rc is None:
        return "hang", f"still running after {elapsed:.0f} s"
    if changed:
        return "file lost", f"changed: {', '.join(changed)}"
    if "Traceback" in err or rc not in (0, 2):
        tail = err.strip().splitlines()[-1:] if err.strip() else [f"exit {rc}"]
        return "traceback", f"exit {rc}: {tail[0][:200]}"
    lines = err.strip().splitlines()
    last = lines[-1] if lines else ""
    if "(an input larger than kvscope checks for)" in last:
        return "wrong", f"caught only by the last-resort handler: {last[:200]}"
    if rc == 2:
        if case.expect == "ok":
            return "wrong", f"refused: {last[:200]}"
        if not (last.startswith("kvscope") and "error" in last):
            return "wrong", f"exit 2 without a kvscope error line: {last[:200]}"
        if len(lines) > 1 and not lines[0].startswith("usage:") and not lines[0].startswith("kvscope"):
            return "wrong", f"more than one line: {lines[0][:120]} ..."
    if rc == 0 and case.expect == "refuse":
        return "wrong", "accepted (exit 0)"
    text = err if rc == 2 else out
    for fragment in case.must_say:
        if fragment not in text:
            return "wrong", f"does not say {fragment!r}: {(last or out.strip()[-200:])[:200]}"
    for fragment in case.must_not_say:
        if fragment in err or fragment in out:
            return "wrong", f"says {fragment!r}: {last[:200]}"
    return "clean", (last if rc == 2 else "exit 0")[:200]


def run_case(case: Case) -> tuple[str, str, float]:
    before = {str(p): Path(p).read_bytes() for p in case.protected if Path(p).exists()}
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1", **case.env}
    limit = SLOW_TIME_LIMIT_S if case.slow else TIME_LIMIT_S
    started = time.monotonic()
    stdout = open(case.stdout, "wb") if case.stdout else subprocess.PIPE  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(KVSCOPE), *case.argv], stdout=stdout, stderr=subprocess.PIPE, env=env,
                            preexec_fn=_limit_memory, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        rc = None
    finally:
        if case.stdout:
            stdout.close()
    out = out or b""
    elapsed = time.monotonic() - started
    changed = [p for p, data in before.items() if not Path(p).exists() or Path(p).read_bytes() != data]
    outcome, detail = judge(case, rc, out.decode(errors="replace"), err.decode(errors="replace"), elapsed, changed)
    if outcome == "clean" and elapsed > limit:
        outcome, detail = "hang", f"took {elapsed:.1f} s"
    return outcome, detail, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the cases whose name holds this text")
    parser.add_argument("--category", help="run one category")
    parser.add_argument("--verbose", action="store_true", help="print every case, not only those that fail")
    parser.add_argument("--json", help="write the outcomes as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the fixtures folder")
    args = parser.parse_args()
    d = Path(tempfile.mkdtemp(prefix="kvscope-hostile-"))
    try:
        cases = (number_cases(d) + trace_cases(d) + preset_cases(d) + config_cases(d) + file_cases(d)
                 + recording_cases(d) + model_folder_cases(d) + third_pass_cases(d, Case, write)
                 + fourth_cli_cases(d, Case, write) + fourth_file_cases(d, Case, write)
                 + fifth_cli_cases(d, Case, write) + fifth_file_cases(d, Case, write)
                 + sixth_cli_cases(d, Case, write) + sixth_file_cases(d, Case, write)
                 + seventh_cli_cases(d, Case, write) + seventh_file_cases(d, Case, write)
                 + eighth_cli_cases(d, Case, write) + eighth_file_cases(d, Case, write)
                 + ninth_cli_cases(d, Case, write) + ninth_file_cases(d, Case, write)
                 + tenth_cli_cases(d, Case, write) + tenth_file_cases(d, Case, write)
                 + eleventh_cli_cases(d, Case, write) + eleventh_file_cases(d, Case, write)
                 + twelfth_cli_cases(d, Case, write) + twelfth_file_cases(d, Case, write)
                 + thirteenth_cli_cases(d, Case, write) + thirteenth_file_cases(d, Case, write)
                 + fourteenth_cli_cases(d, Case, write) + fourteenth_file_cases(d, Case, write)
                 + fifteenth_file_cases(d, Case, write) + fifteenth_cli_cases(d, Case, write)
                 + sixteenth_cli_cases(d, Case, write)
                 + seventeenth_file_cases(d, Case, write) + seventeenth_cli_cases(d, Case, write)
                 + eighteenth_file_cases(d, Case, write) + eighteenth_cli_cases(d, Case, write)
                 + nineteenth_file_cases(d, Case, write)
                 + nineteenth_cli_cases(d, Case, write))
        cases = [c for c in cases if (not args.only or args.only in c.name)
                 and (not args.category or c.category == args.category)]
        results = []
        for case in cases:
            if case.expect == "refuse_or_ok":
                case.expect = "either"
            outcome, detail, elapsed = run_case(case)
            results.append({"name": case.name, "category": case.category, "outcome": outcome, "detail": detail,
                            "seconds": round(elapsed, 2), "argv": case.argv})
            if outcome != "clean" or args.verbose:
                print(f"{outcome:<10} {elapsed:5.1f} s  [{case.category}] {case.name}: {detail}", flush=True)
        by = {}
        for r in results:
            by.setdefault(r["category"], {}).setdefault(r["outcome"], 0)
            by[r["category"]][r["outcome"]] += 1
        print(f"\n{len(results)} cases: " + ", ".join(
            f"{o} {sum(1 for r in results if r['outcome'] == o)}"
            for o in ("clean", "traceback", "hang", "wrong", "file lost")))
        for category, counts in sorted(by.items()):
            print(f"  {category:<10} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        return 0 if all(r["outcome"] == "clean" for r in results) else 1
    finally:
        if args.keep:
            print(f"fixtures kept in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
