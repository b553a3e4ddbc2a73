"""The test run's scratch folder (models it builds, ~400 MB) goes when the run ends: hundreds of
runs that each left one behind filled the disk CI builds the bundle on."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _scratch_parent(tmp_path):
    parent = tmp_path / "tmp"
    parent.mkdir()
    return parent


def _run_a_test_run(folder, scratch_parent, test_source: str) -> None:
    """pytest in a child process on one test file, with the suite's conftest and its own TMPDIR."""
    probe = folder / "test_probe.py"
    probe.write_text(test_source)
    (folder / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=folder, env={**os.environ, "TMPDIR": str(scratch_parent)}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_test_run_leaves_no_scratch_folder(tmp_path):
    scratch_parent = _scratch_parent(tmp_path)
    _run_a_test_run(tmp_path, scratch_parent,
                    "import os\n"
                    "def test_scratch_is_there():\n"
                    "    assert os.path.isdir(os.path.dirname(os.environ['KVSCOPE_CACHE_DIR']))\n")
    assert sorted(p.name for p in scratch_parent.iterdir() if p.name.startswith("kvscope-tests-")) == []


def test_a_run_removes_the_scratch_folders_of_killed_runs_only(tmp_path):
    scratch_parent = _scratch_parent(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that ended: its pid names no process now (reuse within the test is unlikely)
    killed = scratch_parent / "kvscope-tests-killed"
    running = scratch_parent / "kvscope-tests-running"
    for folder, pid in ((killed, gone.pid), (running, os.getpid())):
        (folder / "kvscope" / "models").mkdir(parents=True)
        (folder / "owner-pid").write_text(str(pid))
    unowned_recent = scratch_parent / "kvscope-tests-recent"  # an older run's, still young: left alone
    unowned_recent.mkdir()
    _run_a_test_run(tmp_path, scratch_parent, "def test_nothing():\n    pass\n")
    assert not killed.exists()
    assert running.is_dir() and unowned_recent.is_dir()
