"""`kvscope run` says when the KV pool hit the wall: the default run shows it within seconds, as the
seeds' lesson needs; a GPU whose pool holds all the traffic says never."""

from __future__ import annotations

import json

from kvscope.app.cli.main import main


def _run(tmp_path, *flags) -> dict:
    out = tmp_path / "run.json"
    assert main(["run", "--quiet", "--requests", "300", "--json", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_the_default_run_fills_the_kv_pool_within_fifteen_seconds(tmp_path, capsys):
    report = _run(tmp_path)
    assert report["hardware"] == "l4-24gb"
    assert report["kv_full_at_s"] is not None and report["kv_full_at_s"] <= 15.0
    assert report["peak_kv_usage"] >= 0.99
    assert "KV pool full at" in capsys.readouterr().out


def test_a_pool_that_holds_all_the_traffic_never_fills(tmp_path, capsys):
    report = _run(tmp_path, "--hardware", "h100-80gb")
    assert report["kv_full_at_s"] is None
    assert "never: the pool held every request" in capsys.readouterr().out
