#!/usr/bin/env bash
# Build the lab bundle and its archive (what `make package` runs):
#
#   packaging/build.sh            # PY=path/to/python to use another environment (default .venv)
#
# 1. PyInstaller builds dist/kvscope/ from packaging/kvscope.spec (onedir, no UPX);
# 2. a CPU build is checked for CUDA libraries (there must be none);
# 3. make_archive.sh packs dist/kvscope-<version>-linux-x86_64[-cudaX.Y].tar.gz with install.sh;
# 4. the sizes and the build time are printed, and written to dist/kvscope-build.txt.
#
# The variant follows the torch installed in that Python: a CPU torch gives the CPU bundle, a CUDA
# torch the CUDA bundle (named ...-cuda<version>.tar.gz).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PY:-.venv/bin/python}
started=$(date +%s)

if ! "$PY" -c "import PyInstaller" 2>/dev/null; then
    echo "build.sh: PyInstaller is not installed in $PY; run: $PY -m pip install 'pyinstaller>=6.0'" >&2
    exit 2
fi
version=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
variant=$("$PY" -c 'import torch; print("cpu" if torch.version.cuda is None else "cuda" + torch.version.cuda)')
echo "build.sh: kvscope $version, $variant variant, $("$PY" -c 'import PyInstaller; print("PyInstaller", PyInstaller.__version__)')"

rm -rf dist/kvscope
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller \
    packaging/kvscope.spec
built=$(date +%s)
# --clean rebuilds the work folder every time, so keeping it (~500 MB) only takes disk from the
# archive and the install check that follow.
rm -rf build/pyinstaller

if [ "$variant" = cpu ]; then
    cuda=$(find dist/kvscope \( -name '*.so' -o -name '*.so.*' -o -name '*.dll' -o -name '*.dylib' \) \
        \( -iname 'libcu*' -o -iname 'libnv*' -o -iname '*cudnn*' -o -iname '*nccl*' -o -iname 'libtorch_cuda*' \
        -o -iname 'cudart*' -o -iname 'cu*64_*.dll' -o -iname 'libc10_cuda*' \) -print)
    if [ -n "$cuda" ]; then
        echo "build.sh: the CPU bundle carries CUDA libraries:" >&2
        echo "$cuda" >&2
        exit 1
    fi
fi

archive=$(packaging/make_archive.sh dist/kvscope dist "$version" "$variant")
finished=$(date +%s)

unpacked=$(du -sh dist/kvscope | cut -f1)
unpacked_bytes=$(du -sb dist/kvscope | cut -f1)
archive_bytes=$(stat -c %s "$archive")
report="dist/kvscope-build.txt"
{
    echo "kvscope $version ($variant), built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -sm)"
    echo "bundle   dist/kvscope/  $unpacked ($((unpacked_bytes / 1048576)) MiB unpacked)"
    echo "archive  $archive  $((archive_bytes / 1048576)) MiB"
    echo "time     PyInstaller $((built - started)) s, archive $((finished - built)) s, total $((finished - started)) s"
} | tee "$report"
