#!/usr/bin/env bash
# Pack a built bundle with its installer:
#
#   packaging/make_archive.sh BUNDLE_DIR OUT_DIR VERSION [VARIANT]
#
# writes OUT_DIR/kvscope-VERSION-linux-x86_64.tar.gz (VARIANT "cpu" or empty), or
# OUT_DIR/kvscope-VERSION-linux-x86_64-VARIANT.tar.gz (a CUDA build, say "cuda12.8"), holding
#
#   kvscope-VERSION-linux-x86_64[-VARIANT]/
#     install.sh  uninstall.sh  kvscope.desktop.in  VERSION  README.txt
#     kvscope/    the PyInstaller bundle (kvscope/kvscope is the launcher)
#
# and prints the archive's path. build.sh calls it; the tests call it on a fake bundle.
set -euo pipefail

[ $# -ge 3 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bundle=$(cd "$1" && pwd -P)
mkdir -p "$2"
out=$(cd "$2" && pwd -P)
version=$3
variant=${4:-cpu}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

[ -x "$bundle/kvscope" ] || [ -x "$bundle/kvscope.exe" ] || { echo "make_archive.sh: no launcher in $bundle" >&2; exit 1; }

os=$(uname -s | tr '[:upper:]' '[:lower:]')
arch=$(uname -m)
name="kvscope-$version-$os-$arch"
[ "$variant" = cpu ] || name="$name-$variant"

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
top="$staging/$name"
mkdir -p "$top"
cp -a "$bundle" "$top/kvscope"
cp "$here/install.sh" "$here/uninstall.sh" "$here/kvscope.desktop.in" "$top/"
chmod 755 "$top/install.sh" "$top/uninstall.sh"
printf '%s\n' "$version" > "$top/VERSION"
cat > "$top/README.txt" <<EOF
kvscope $version ($variant build for $os $arch)

Install for this user (no root, no network, no Python needed):

    ./install.sh            # or: ./install.sh --check   (then runs the installed self-test)

It puts the program in ~/.local/share/kvscope/$version/, a launcher at ~/.local/bin/kvscope and
a kvscope entry with its icon in the applications menu. To remove exactly those:

    ~/.local/share/kvscope/$version/uninstall.sh

Check an installation at any time:  kvscope --self-test
Without installing, from this folder: kvscope/kvscope gui

The Azure LLM inference trace inside (kvscope/_internal/kvscope/presets/traces/) is CC-BY 4.0;
see ATTRIBUTION.md there.
EOF

archive="$out/$name.tar.gz"
rm -f "$archive"
tar -C "$staging" -cf - "$name" | gzip -6 > "$archive.tmp"
mv "$archive.tmp" "$archive"
echo "$archive"
