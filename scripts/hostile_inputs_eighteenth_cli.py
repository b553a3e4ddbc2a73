"""The eighteenth hostile pass's cases (the command line), for scripts/hostile_inputs.py; every name begins "cli18:"
(`--only "cli18:"` runs them). Found, and how it behaved before: an output named for a compressor was written
uncompressed under that name: `run --json r.json.gz`, `export --perfetto t.json.gz`, `compare --csv c.csv.xz`, `bench
calibration --json b.json.bz2`, and `run --record r.kvrec.gz` (a recording compresses its steps inside it): plain
text that gunzip, and pandas' read_csv (it infers the compression from the name), fail on. `export --csv o.tsv` wrote
comma-separated values under a tab-separated name (read as one column). A run stopped early (Ctrl+C, SIGTERM, an
engine error) whose --record named a new file kept the steps so far and said only "kvscope: interrupted" (or the
error): nothing said whether the file was written, and of what. verify said "1 partial prompt chunks", export "1
request tracks". `kvscope --version` was "unrecognized arguments: --version" (and, once taken, `--version >&-`
printed the version on stderr before the closed-output error). Every case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_eighteenth.py instead): the run stopped early (a
signal at a chosen step needs the engine's step replaced in-process), the singular counts (verify's needs a
model loaded) and `--version` with standard output closed (Case cannot close it)."""

from __future__ import annotations

from pathlib import Path


def eighteenth_cli_cases(d: Path, Case, write) -> list:
    return _compressed_name_cases(d, Case, write) + _version_cases(Case)


def _case(Case, name: str, *args, **kwargs):
    return Case(f"cli18: {name}", *args, **kwargs)


def _compressed_name_cases(d: Path, Case, write) -> list:
    folder = d / "cli18"
    folder.mkdir(parents=True, exist_ok=True)
    run = ["run", "--quiet", "--requests", "1"]
    said = "-compressed file; give the name without "
    kept = write(folder / "kept.json.gz", b"\x1f\x8b an older file")
    return [
        _case(Case, "run --json r.json.gz (written uncompressed under gzip's name)", "files",
              [*run, "--json", str(folder / "r.json.gz")], must_say=("writes JSON uncompressed", "gzip" + said)),
        _case(Case, "run --json KEPT.json.gz over a file (refused, the file as it was)", "files",
              [*run, "--json", str(kept)], must_say=("gzip" + said,), protected=[kept]),
        _case(Case, "run --record r.kvrec.gz (a recording compresses inside: no gzip file)", "files",
              [*run, "--record", str(folder / "r.kvrec.gz")],
              must_say=("its steps compressed inside it", "gzip" + said), must_not_say=("afterwards",)),
        _case(Case, "compare --csv c.csv.xz (written uncompressed under xz's name)", "files",
              ["compare", "--scenario", "static-vs-continuous", "--csv", str(folder / "c.csv.xz")],
              must_say=("writes CSV uncompressed", "xz" + said)),
        _case(Case, "bench calibration --json b.json.bz2 (before minutes of benchmark)", "files",
              ["bench", "calibration", "--json", str(folder / "b.json.bz2")], must_say=("bzip2" + said,)),
        _case(Case, "verify --json v.json.zst (before loading a model)", "files",
              ["verify", "--model", "tiny-llama", "--device", "cpu", "--json", str(folder / "v.json.zst")],
              must_say=("zstd" + said,), must_not_say=("loading",)),
        _case(Case, "run --json R.JSON.ZIP (upper case: still zip's name)", "files",
              [*run, "--json", str(folder / "R.JSON.ZIP")], must_say=("zip" + said,)),
        _case(Case, "run --json r.json (no compressor's name: taken)", "files",
              [*run, "--json", str(folder / "r.json")], expect="ok"),
        _case(Case, "run --json r.gzipped (a name that only begins like one: taken)", "files",
              [*run, "--json", str(folder / "r.gzipped")], expect="ok"),
    ] + _export_cases(d, Case, write)


def _export_cases(d: Path, Case, write) -> list:
    from hostile_inputs_thirteenth_cli import _recording  # a small run's recording, written in this process

    folder = d / "cli18"
    recording = _recording(folder)
    export = ["export", str(recording)]
    return [
        _case(Case, "export --perfetto t.json.gz (Perfetto's compressed name, written as plain JSON)", "files",
              [*export, "--perfetto", str(folder / "t.json.gz")], must_say=("writes JSON uncompressed", "gzip")),
        _case(Case, "export --csv o.tsv (commas under a tab-separated name)", "files",
              [*export, "--csv", str(folder / "o.tsv")],
              must_say=("writes CSV, and the name's .tsv says tab-separated values; give a .csv name",)),
        _case(Case, "export --csv o.csv --perfetto t.json (each its own name: taken)", "files",
              [*export, "--csv", str(folder / "o.csv"), "--perfetto", str(folder / "t.json")], expect="ok",
              must_say=("Perfetto trace written",)),
    ]



def _version_cases(Case) -> list:
    return [
        _case(Case, "--version (was 'unrecognized arguments: --version')", "flags", ["--version"], expect="ok",
              must_say=("kvscope ",)),
        _case(Case, "--version > /dev/full (said as any output that cannot be written)", "flags", ["--version"],
              stdout="/dev/full", must_say=("cannot write the output",)),
        _case(Case, "math --version (kvscope's own flag after a command: said whose it is)", "flags",
              ["math", "--version"], must_say=("a flag of `kvscope` itself",)),
    ]
