"""The system libraries Qt's X11 platform plugin needs, checked before the window opens.

PySide6's wheel carries Qt itself but not the X11 client libraries its xcb plugin links against; on
a fresh Debian or Ubuntu some are missing (libxcb-cursor0 first of all), and Qt then aborts with
"could not load the Qt platform plugin" and a core dump. Here `ldd` on the plugin names what is
missing before Qt tries, and the apt packages that provide it: one line, exit 2, or (as root, from
`make run`) installed.

`python -m kvscope.app.cli.qt_system_libs [--install]` is what scripts/ensure_qt_system_libs.sh runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from kvscope.engine.config import ConfigError

# Library (soname) -> the Debian/Ubuntu package holding it: every library the xcb plugin and
# libQt6XcbQpa load that a minimal Debian 12 / Ubuntu 22.04+ may lack (Qt's "Qt for X11
# Requirements" list, checked against `ldd libqxcb.so` and `dpkg -S`).
DEBIAN_PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0", "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0", "libxcb-sync.so.1": "libxcb-sync1", "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-glx.so.0": "libxcb-glx0", "libxcb.so.1": "libxcb1", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0", "libX11-xcb.so.1": "libx11-xcb1", "libX11.so.6": "libx11-6",
    "libXau.so.6": "libxau6", "libXdmcp.so.6": "libxdmcp6", "libEGL.so.1": "libegl1", "libGL.so.1": "libgl1",
    "libGLX.so.0": "libglx0", "libGLdispatch.so.0": "libglvnd0", "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1", "libfreetype.so.6": "libfreetype6", "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0", "libpng16.so.16": "libpng16-16",
}
HEADLESS_PLATFORMS = {"offscreen", "minimal", "vnc", "eglfs", "linuxfb"}
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)


def uses_xcb(environ=os.environ, platform: str = sys.platform) -> bool:
    """Whether Qt will open its X11 plugin: on Linux, unless QT_QPA_PLATFORM names another one
    (offscreen for headless runs) or a Wayland session leaves X11 alone."""
    if not platform.startswith("linux"):
        return False
    chosen = environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if chosen:
        return chosen == "xcb"
    return not (environ.get("WAYLAND_DISPLAY") and environ.get("XDG_SESSION_TYPE") == "wayland")


def xcb_plugin() -> Path | None:
    """libqxcb.so of the Qt that PySide6 loads (in a venv or the packaged bundle), None without one."""
    from PySide6.QtCore import QLibraryInfo

    plugin = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames `ldd` reports as "not found", in its order, each once."""
    return list(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def packages_for(libraries: list[str]) -> tuple[list[str], list[str]]:
    """(the apt packages providing the known libraries, the libraries this table does not know)."""
    packages = list(dict.fromkeys(DEBIAN_PACKAGES[lib] for lib in libraries if lib in DEBIAN_PACKAGES))
    return packages, [lib for lib in libraries if lib not in DEBIAN_PACKAGES]


def missing_for_xcb() -> list[str]:
    """The libraries the xcb plugin cannot find on this machine ([] when all are there, or when
    there is no plugin or no ldd to ask)."""
    plugin, ldd = xcb_plugin(), shutil.which("ldd")
    if plugin is None or ldd is None:
        return []
    completed = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=30)
    return missing_libraries(completed.stdout)


def install_command(packages: list[str]) -> str:
    return f"sudo apt-get install -y {' '.join(packages)}"


def problem(libraries: list[str]) -> str | None:
    """The one line saying what to install for these missing libraries; None if there are none."""
    if not libraries:
        return None
    packages, unknown = packages_for(libraries)
    what = f"Qt's X11 platform plugin needs system libraries this machine lacks ({', '.join(libraries)})"
    fixes = [f"install them: {install_command(packages)}"] if packages else []
    if unknown:
        fixes.append(f"find the package of {', '.join(unknown)} with `apt-file search`")
    return f"{what}; {' and '.join(fixes)}; or run headless with QT_QPA_PLATFORM=offscreen"


def platform_keys() -> set[str] | None:
    """The platform names Qt's plugins answer to (a plugin may have several: wayland, wayland-egl),
    read from their metadata without loading them; None when they cannot be listed."""
    from PySide6.QtCore import QLibraryInfo, QPluginLoader

    folder = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms"
    try:
        plugins = sorted(folder.iterdir())
    except OSError:
        return None
    keys = {str(key).lower() for plugin in plugins
            for key in QPluginLoader(str(plugin)).metaData().get("MetaData", {}).get("Keys", [])}
    return keys or None


def unknown_platform(environ=os.environ) -> str | None:
    """QT_QPA_PLATFORM naming no plugin Qt has (a typo, "nonsense"): Qt aborts with a core dump
    (exit 134). It may list fallbacks ("wayland;xcb") and give a plugin arguments ("vnc:size=800x600");
    with a plugin folder of the user's own (QT_QPA_PLATFORM_PLUGIN_PATH, QT_PLUGIN_PATH) Qt finds
    more than this can list, and it is left to Qt."""
    given = environ.get("QT_QPA_PLATFORM", "").strip()
    if not given or environ.get("QT_QPA_PLATFORM_PLUGIN_PATH") or environ.get("QT_PLUGIN_PATH"):
        return None
    names = [part.split(":")[0].strip().lower() for part in given.split(";") if part.strip()]
    keys = platform_keys()
    if keys is None or any(name in keys for name in names):
        return None
    return (f"QT_QPA_PLATFORM={given[:80]!r}: Qt has no such platform plugin (it would abort); it has "
            f"{', '.join(sorted(keys))}: use offscreen to run headless, or unset it")


def x_display_problem(environ=os.environ) -> str | None:
    """Qt's X11 plugin with no X server to talk to (no DISPLAY on a headless machine, or one that
    does not answer): Qt aborts with a core dump. libxcb is asked as Qt would ask it."""
    display = environ.get("DISPLAY", "")
    headless = "; on a machine without a display run it headless with QT_QPA_PLATFORM=offscreen"
    if not display.strip():
        return "the window needs a display, and DISPLAY is not set (no X server to open it on)" + headless
    import ctypes

    try:
        xcb = ctypes.CDLL("libxcb.so.1")
    except OSError:  # missing: missing_for_xcb() has named its package already
        return None
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    connection = xcb.xcb_connect(os.fsencode(display), None)
    failed = xcb.xcb_connection_has_error(connection)
    xcb.xcb_disconnect(connection)
    if failed:
        return (f"cannot open the X display DISPLAY={display[:80]!r} (no X server answers there, or it refused "
                "this user)" + headless)
    return None


def check_qt_system_libs(environ=os.environ) -> None:
    """Before QApplication: an unknown platform, a missing X11 library, or an X display that is not
    there is one ConfigError line, not Qt's abort."""
    message = unknown_platform(environ)
    if message:
        raise ConfigError(message)
    if not uses_xcb(environ):
        return
    message = problem(missing_for_xcb()) or x_display_problem(environ)
    if message:
        raise ConfigError(message)


def ensure(install: bool) -> int:
    """The script's entry: 0 when nothing is missing (or, as root with install, once apt-get put it
    there); else the line saying what to run, and 2."""
    if not uses_xcb():
        return 0
    libraries = missing_for_xcb()
    if not libraries:
        return 0
    packages, unknown = packages_for(libraries)
    if install and packages and not unknown and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"kvscope: installing Qt's X11 libraries: apt-get install -y {' '.join(packages)}", flush=True)
        subprocess.run(["apt-get", "update", "-q"], check=False)
        if subprocess.run(["apt-get", "install", "-y", "-q", *packages], check=False).returncode == 0:
            libraries = missing_for_xcb()
    message = problem(libraries)
    if message:
        print(f"kvscope: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(ensure(install="--install" in sys.argv[1:]))
