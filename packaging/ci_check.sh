#!/usr/bin/env bash
# CI for the lab installer, so it never rots unseen: build the bundle and the archive, run the
# bundle's own self-test, then install the archive into a throw-away HOME, run the installed
# launcher's self-test, and uninstall, checking that nothing is left behind.
#
#   packaging/ci_check.sh          (from a clean clone: `make package` creates .venv as needed)
#
# Needs no display: the self-test opens its window offscreen when there is none.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=$(date +%s)
make package
built=$(date +%s)

echo "== the bundle's self-test"
dist/kvscope/kvscope --self-test

echo "== install from the archive into a temporary HOME, self-test, uninstall"
archive=$(ls -t dist/kvscope-*-linux-*.tar.gz | head -n 1)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/home" "$scratch/unpacked"
tar -xzf "$archive" -C "$scratch/unpacked"
top=$(ls -d "$scratch"/unpacked/kvscope-*)
version=$(cat "$top/VERSION")
HOME="$scratch/home" XDG_DATA_HOME="" bash "$top/install.sh" --check
HOME="$scratch/home" bash "$scratch/home/.local/share/kvscope/$version/uninstall.sh"
leftover=$(find "$scratch/home" \( -type f -o -type l \) ! -path "$scratch/home/.cache/*" -print)
if [ -n "$leftover" ]; then
    echo "ci_check.sh: uninstall left files behind:" >&2
    echo "$leftover" >&2
    exit 1
fi

finished=$(date +%s)
echo "ci_check.sh: passed (package $((built - started)) s, self-tests and install $((finished - built)) s)"
