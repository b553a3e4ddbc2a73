"""The test run's scratch folder (models it builds, ~400 MB) goes when the run ends: hundreds of
runs that each left one behind filled the disk CI builds the bundle on."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_test_run_leaves_no_scratch_folder(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import os\n"
        "def test_scratch_is_there():\n"
        "    assert os.path.isdir(os.path.dirname(os.environ['KVSCOPE_CACHE_DIR']))\n"
    )
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_parent)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in scratch_parent.iterdir() if p.name.startswith("kvscope-tests-")) == []


def test_a_run_removes_the_scratch_folders_of_killed_runs_only(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_nothing():\n    pass\n")
    (tmp_path / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that ended: its pid names no process now (reuse within the test is unlikely)
    killed = scratch_parent / "kvscope-tests-killed"
    running = scratch_parent / "kvscope-tests-running"
    for folder, pid in ((killed, gone.pid), (running, os.getpid())):
        (folder / "kvscope" / "models").mkdir(parents=True)
        (folder / "owner-pid").write_text(str(pid))
    unowned_recent = scratch_parent / "kvscope-tests-recent"  # an older run's, still young: left alone
    unowned_recent.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_parent)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not killed.exists()
    assert running.is_dir() and unowned_recent.is_dir()
