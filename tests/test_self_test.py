"""The installation self-test and the lab installer's scripts.

The PyInstaller bundle itself is built by `make package` / packaging/ci_check.sh, not here: these
tests run the self-test in-process and the install scripts against a fake bundle in a temporary
HOME.
"""

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from kvscope.app.bench.self_test import run_self_test

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None or os.name == "nt", reason="the installer is for Linux")


def test_the_self_test_passes_every_check_and_reports_each_with_its_time(capsys):
    assert run_self_test() == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"\s+(PASS|FAIL)\s", line)]
    names = [line.split()[1] for line in lines]
    assert names == ["imports", "presets", "simulated", "real", "Qt", "window", "start-up"], out
    assert all(line.split()[0] == "PASS" for line in lines), out
    assert all(re.search(r"\d+\.\d\d s", line) for line in lines), out
    assert "window drawn" in lines[-1] and "after process start" in lines[-1], out
    assert re.search(r"\(the trained model (as converted earlier in \S+|converted first, as on a first launch)\)$",
                     lines[-2]), out
    assert "all 7 checks passed" in out


def fake_conversion(directory: Path) -> Path:
    """A whole conversion as cache_damage reads one: its four files, the weights as long as their header says."""
    import json

    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    save_file({"w": torch.zeros(4)}, str(directory / "model.safetensors"))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_text(json.dumps({"from": str(directory)}))
    return directory


def test_the_window_check_reuses_the_users_converted_model_and_converts_where_there_is_none(tmp_path, monkeypatch):
    """Converting the trained model again took ~25 s of a ~55 s self-test; the user's whole conversion
    is linked into the temporary cache instead, and a cut one is not taken (the check converts, as a
    first launch does)."""
    from kvscope.app.bench.self_test import reuse_converted_trained_model
    from kvscope.app.lab.trained_model import is_converted, trained_model_dir

    users = fake_conversion(tmp_path / "user-cache" / "models" / "smollm2-135m-instruct")
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "self-test-cache"))
    assert reuse_converted_trained_model(users) == users
    assert is_converted(trained_model_dir()) and trained_model_dir() != users
    assert (trained_model_dir() / "config.json").read_text() == (users / "config.json").read_text()
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "another-cache"))
    with open(users / "model.safetensors", "r+b") as weights:
        weights.truncate(weights.seek(0, 2) - 1)  # a conversion cut short
    assert reuse_converted_trained_model(users) is None
    assert not trained_model_dir().exists()
    assert reuse_converted_trained_model(tmp_path / "nothing-here") is None


def test_a_failing_check_fails_the_self_test(monkeypatch, capsys):
    from kvscope.app.bench import self_test

    def broken():
        raise RuntimeError("no presets here")

    monkeypatch.setattr(self_test, "check_presets", broken)
    for name in ("check_real", "check_window", "check_startup"):  # slow, and not what this test is about
        monkeypatch.setattr(self_test, name, lambda *args: "skipped")
    assert run_self_test() == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL\s+presets .*RuntimeError: no presets here", out), out
    assert "FAILED 1 of 7 checks (presets)" in out


def test_an_unknown_self_test_option_is_a_usage_error(capsys):
    assert run_self_test(["--nonsense"]) == 2
    assert "--nonsense" in capsys.readouterr().err


def test_the_frozen_entry_script_runs_the_cli_and_the_self_test_options():
    import json
    import sys

    entry = str(PACKAGING / "kvscope_main.py")
    math = subprocess.run([sys.executable, entry, "math", "--model", "llama-2-7b", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert math.returncode == 0, math.stderr
    assert json.loads(math.stdout)["kv_bytes_per_token"] == 512 * 1024
    bad = subprocess.run([sys.executable, entry, "--self-test", "--nonsense"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--startup" in bad.stderr


# -- the installer ----------------------------------------------------------------------------------
@pytest.fixture
def archive(tmp_path):
    """An archive made by make_archive.sh from a fake bundle laid out like PyInstaller's."""
    bundle = tmp_path / "dist" / "kvscope"
    (bundle / "_internal" / "kvscope" / "resources").mkdir(parents=True)
    shutil.copy(ROOT / "resources" / "kvscope.svg", bundle / "_internal" / "kvscope" / "resources")
    launcher = bundle / "kvscope"
    launcher.write_text('#!/bin/sh\necho "fake kvscope $*"\n')
    launcher.chmod(0o755)
    os.symlink("kvscope/resources/kvscope.svg", bundle / "_internal" / "icon-link.svg")  # the bundle has symlinks
    made = subprocess.run(["bash", str(PACKAGING / "make_archive.sh"), str(bundle), str(tmp_path / "out"), "9.8.7"],
                          capture_output=True, text=True, check=True)
    path = Path(made.stdout.strip())
    assert path.name == f"kvscope-9.8.7-linux-{os.uname().machine}.tar.gz"
    return path


def unpack(archive: Path, where: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="tar")
    (top,) = where.iterdir()
    return top


def run(command, home: Path, **extra_env):
    env = {"HOME": str(home), "PATH": os.environ["PATH"], **extra_env}
    return subprocess.run(command, capture_output=True, text=True, env=env)


@needs_bash
def test_install_then_uninstall_creates_and_removes_exactly_the_launcher_menu_entry_and_bundle(archive, tmp_path):
    top = unpack(archive, tmp_path / "unpacked")
    assert sorted(p.name for p in top.iterdir()) == ["README.txt", "VERSION", "install.sh", "kvscope",
                                                     "kvscope.desktop.in", "uninstall.sh"]
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache" / "kvscope").mkdir(parents=True)  # the user's model cache: not the installer's

    installed = run(["bash", str(top / "install.sh")], home)
    assert installed.returncode == 0, installed.stderr
    target = home / ".local" / "share" / "kvscope" / "9.8.7"
    link = home / ".local" / "bin" / "kvscope"
    desktop = home / ".local" / "share" / "applications" / "kvscope.desktop"
    icon = target / "_internal" / "kvscope" / "resources" / "kvscope.svg"
    assert link.is_symlink() and link.resolve() == (target / "kvscope").resolve()
    assert (target / "_internal" / "icon-link.svg").is_symlink()
    assert run([str(link), "gui"], home).stdout.strip() == "fake kvscope gui"
    entry = desktop.read_text()
    assert f'Exec="{target}/kvscope" gui' in entry
    assert f"Icon={icon}\n" in entry and icon.is_file()
    assert "Type=Application" in entry and "Name=kvscope" in entry and "@" not in entry
    if shutil.which("desktop-file-validate"):
        assert run(["desktop-file-validate", str(desktop)], home).returncode == 0

    created = {p for p in home.rglob("*")}
    uninstalled = run(["bash", str(target / "uninstall.sh")], home)
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert not link.exists() and not link.is_symlink()
    assert not desktop.exists() and not target.exists()
    assert not (home / ".local" / "share" / "kvscope").exists()
    left = {p for p in home.rglob("*")}
    assert left == {home / ".cache", home / ".cache" / "kvscope", home / ".local", home / ".local" / "bin",
                    home / ".local" / "share", home / ".local" / "share" / "applications"}
    assert left < created


@needs_bash
def test_reinstalling_replaces_and_an_older_version_uninstalls_without_touching_the_newer(archive, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    top = unpack(archive, tmp_path / "a")
    assert run(["bash", str(top / "install.sh")], home).returncode == 0
    again = run(["bash", str(top / "install.sh"), "--check"], home)
    assert again.returncode == 0 and "replacing" in again.stdout
    assert again.stdout.strip().endswith("fake kvscope --self-test")  # --check runs the installed self-test

    # a second version, installed over the first: the launcher and menu entry move to it
    newer = tmp_path / "b"
    shutil.copytree(top, newer)
    (newer / "VERSION").write_text("9.9.0\n")
    assert run(["bash", str(newer / "install.sh")], home).returncode == 0
    share = home / ".local" / "share"
    old_removed = run(["bash", str(share / "kvscope" / "9.8.7" / "uninstall.sh")], home)
    assert old_removed.returncode == 0, old_removed.stderr
    assert not (share / "kvscope" / "9.8.7").exists()
    link = home / ".local" / "bin" / "kvscope"
    assert link.resolve() == (share / "kvscope" / "9.9.0" / "kvscope").resolve()
    assert "9.9.0" in (share / "applications" / "kvscope.desktop").read_text()
    assert run(["bash", str(share / "kvscope" / "9.9.0" / "uninstall.sh")], home).returncode == 0
    assert not link.is_symlink() and not (share / "applications" / "kvscope.desktop").exists()


@needs_bash
def test_the_installer_refuses_sudo_and_an_incomplete_archive(archive, tmp_path):
    top = unpack(archive, tmp_path / "u")
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() == 0:  # `sudo ./install.sh` would install for root, not for the user who typed it
        result = run(["bash", str(top / "install.sh")], home, SUDO_USER="someone")
        assert result.returncode == 2 and "without sudo" in result.stderr
    (top / "kvscope" / "kvscope").unlink()
    result = run(["bash", str(top / "install.sh")], home)
    assert result.returncode != 0 and "unpack the whole archive" in result.stderr
    assert not (home / ".local").exists()



@needs_bash
def test_the_installer_ignores_a_relative_xdg_data_home_and_refuses_what_would_break_the_launcher(archive, tmp_path):
    top = unpack(archive, tmp_path / "u")
    home = tmp_path / "home"
    home.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    # the XDG spec's rule: a relative XDG_DATA_HOME is invalid; it landed in the folder this ran from
    relative = subprocess.run(["bash", str(top / "install.sh")], capture_output=True, text=True, cwd=elsewhere,
                              env={"HOME": str(home), "PATH": os.environ["PATH"], "XDG_DATA_HOME": "rel"})
    assert relative.returncode == 0, relative.stderr
    assert "XDG_DATA_HOME (rel) is not an absolute path; ignored" in relative.stdout
    assert not any(elsewhere.iterdir())
    link = home / ".local" / "bin" / "kvscope"
    assert link.resolve() == (home / ".local" / "share" / "kvscope" / "9.8.7" / "kvscope").resolve()
    assert run([str(link), "gui"], home).stdout.strip() == "fake kvscope gui"

    def refused(home_text, said):
        result = subprocess.run(["bash", str(top / "install.sh")], capture_output=True, text=True, cwd=elsewhere,
                                env={"HOME": home_text, "PATH": os.environ["PATH"]})
        assert result.returncode == 2 and said in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result

    refused(".", "HOME (.) is not an absolute path")  # the launcher would point relative to ~/.local/bin
    broken = tmp_path / "line\nbreak"
    broken.mkdir()
    refused(str(broken), "contains a line break")  # it split the manifest: uninstall.sh could not find itself
    assert not (broken / ".local").exists()
    blocked = tmp_path / "blocked"
    (blocked / ".local").mkdir(parents=True)
    (blocked / ".local" / "share").write_text("a file where a folder goes")
    refused(str(blocked), f"{blocked / '.local' / 'share'} is a file, not a folder")


# -- Qt's X11 libraries ------------------------------------------------------------------------------
LDD_ON_A_FRESH_DEBIAN = """\
\tlinux-vdso.so.1 (0x00007ffc)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibfoo-unheard-of.so.3 => not found
\tlibxcb1.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)
"""


def test_the_missing_x11_libraries_are_named_with_the_apt_line_that_installs_them():
    from kvscope.app.cli.qt_system_libs import missing_libraries, problem

    missing = missing_libraries(LDD_ON_A_FRESH_DEBIAN)
    assert missing == ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libfoo-unheard-of.so.3"]
    line = problem(missing)
    assert "install them: sudo apt-get install -y libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 and" in line
    assert "libfoo-unheard-of.so.3 with `apt-file search`" in line and "QT_QPA_PLATFORM=offscreen" in line
    assert "\n" not in line and problem([]) is None


def test_headless_and_wayland_runs_need_no_x11_libraries():
    from kvscope.app.cli.qt_system_libs import uses_xcb

    assert uses_xcb({}, "linux")
    assert uses_xcb({"QT_QPA_PLATFORM": "xcb"}, "linux")
    assert not uses_xcb({"QT_QPA_PLATFORM": "offscreen"}, "linux")
    assert not uses_xcb({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}, "linux")
    assert not uses_xcb({}, "darwin")


def test_kvscope_gui_refuses_to_start_without_them_in_one_line(monkeypatch):
    from kvscope.app.cli import qt_system_libs
    from kvscope.engine.config import ConfigError

    monkeypatch.setattr(qt_system_libs, "missing_for_xcb", lambda: ["libxcb-cursor.so.0"])
    with pytest.raises(ConfigError, match=r"sudo apt-get install -y libxcb-cursor0"):
        qt_system_libs.check_qt_system_libs({"QT_QPA_PLATFORM": "xcb"})
    qt_system_libs.check_qt_system_libs({"QT_QPA_PLATFORM": "offscreen"})  # headless: not asked


def test_the_self_test_fails_on_missing_x11_libraries_only_where_the_window_would_use_x11(monkeypatch):
    """On an X11 desktop a missing library is a failed check; headless (CI, a fresh machine with no
    display, QT_QPA_PLATFORM=offscreen) the window needs none, so the check names them and passes."""
    from kvscope.app.bench import self_test
    from kvscope.app.cli import qt_system_libs

    monkeypatch.setattr(qt_system_libs, "missing_for_xcb", lambda: ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"])
    monkeypatch.setattr(qt_system_libs, "xcb_plugin", lambda: Path("/qt/plugins/platforms/libqxcb.so"))
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    said = self_test.check_qt_system_libs()
    assert "not needed here" in said and "offscreen" in said
    assert "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1" in said
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    with pytest.raises(self_test.CheckFailed, match=r"sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1"):
        self_test.check_qt_system_libs()


@needs_bash
def test_the_make_run_script_exits_2_with_the_apt_line_when_not_root(monkeypatch, capsys):
    from kvscope.app.cli import qt_system_libs

    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr(qt_system_libs, "missing_for_xcb", lambda: ["libxcb-icccm.so.4"])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert qt_system_libs.ensure(install=True) == 2
    assert "sudo apt-get install -y libxcb-icccm4" in capsys.readouterr().err
    assert "ensure_qt_system_libs.sh" in (ROOT / "Makefile").read_text()
    assert "kvscope.app.cli.qt_system_libs --install" in (ROOT / "scripts" / "ensure_qt_system_libs.sh").read_text()


@needs_bash
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_names_the_package_in_one_line_where_python_cannot_create_the_venv(tmp_path):
    """A fresh Debian/Ubuntu has python3 but not python3-venv (no ensurepip): `make run` says which
    package to install, in one line, and stops with status 2 before anything is installed."""
    no_ensurepip = tmp_path / "python3"
    no_ensurepip.write_text("#!/bin/sh\nexit 1\n")  # fails `import ensurepip` (and all else: nothing runs)
    no_ensurepip.chmod(0o755)
    venv = tmp_path / "venv"
    for python, packages in ((no_ensurepip, "python3-venv"), (tmp_path / "absent", "python3 python3-venv")):
        proc = subprocess.run(["make", "-s", "-C", str(ROOT), f"VENV={venv}", f"PYTHON={python}", "run"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        said = [line for line in proc.stderr.splitlines() if not line.startswith("make")]  # make's own "Error 2"
        assert len(said) == 1 and said[0].startswith("kvscope: ") and said[0].endswith(
            f": sudo apt-get install -y {packages}"), proc.stderr
        assert not venv.exists()


def test_make_says_in_one_line_that_a_python_older_than_3_10_is_too_old(tmp_path):
    """pip would install torch for it first, then refuse kvscope with "requires a different Python"."""
    old = tmp_path / "python3.8"
    old.write_text('#!/bin/sh\ncase "$*" in *ensurepip*) exit 0 ;; -V) echo "Python 3.8.10"; exit 0 ;; *) exit 1 ;; esac\n')
    old.chmod(0o755)
    venv = tmp_path / "venv"
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), f"VENV={venv}", f"PYTHON={old}", "run"],
                          capture_output=True, text=True, timeout=60)
    said = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert proc.returncode == 2 and said == [f"kvscope: {old} is Python 3.8.10; kvscope needs Python 3.10 or newer: "
                                             "install one and run make PYTHON=python3.11 (or its name)"], proc.stderr
    assert not venv.exists()
