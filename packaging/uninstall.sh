#!/usr/bin/env bash
# Remove an installed kvscope: exactly what install.sh created, as its install-manifest lists it.
#
#   ~/.local/share/kvscope/<version>/uninstall.sh
#
# The launcher symlink and the menu entry go only if they still belong to this installation (a
# later install of another version may have taken them over). Your model cache (~/.cache/kvscope)
# and your own presets (~/.config/kvscope) stay.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
manifest="$here/install-manifest"
[ -f "$manifest" ] || { echo "uninstall.sh: no install-manifest beside me; run the installed copy" >&2; exit 2; }

version="" target="" link="" desktop=""
while IFS='=' read -r key value; do
    case "$key" in
        version) version=$value ;;
        target) target=$value ;;
        link) link=$value ;;
        desktop) desktop=$value ;;
    esac
done < "$manifest"

if [ "$(cd "$target" 2>/dev/null && pwd -P)" != "$here" ] || [ ! -x "$here/kvscope" ]; then
    echo "uninstall.sh: the manifest names $target, not this folder ($here); nothing removed" >&2
    exit 1
fi

if [ -n "$link" ] && [ -L "$link" ] && [ "$(readlink "$link")" = "$target/kvscope" ]; then
    rm -f "$link"
    echo "removed $link"
fi
if [ -n "$desktop" ] && [ -f "$desktop" ] && grep -qxF "X-kvscope-Target=$target" "$desktop"; then
    rm -f "$desktop"
    echo "removed $desktop"
fi

rm -rf "$target"
echo "removed $target"
rmdir "$(dirname "$target")" 2>/dev/null || true  # ~/.local/share/kvscope, once no version is left
echo "kvscope $version uninstalled (left alone: ~/.cache/kvscope, ~/.config/kvscope)"
