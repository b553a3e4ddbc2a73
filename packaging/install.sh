#!/usr/bin/env bash
# Install kvscope for this user: no root, no network, no Python needed.
#
#   ./install.sh           install (or reinstall) this version
#   ./install.sh --check   and then run the installed copy's self-test
#
# What it creates, and all that uninstall.sh removes again:
#   ~/.local/share/kvscope/<version>/          the bundle (with uninstall.sh and its manifest)
#   ~/.local/bin/kvscope                       a symlink to the bundle's launcher
#   ~/.local/share/applications/kvscope.desktop  the menu entry, with the kvscope icon
# (~/.local/share is $XDG_DATA_HOME where that is set.) kvscope itself later writes its model cache
# to ~/.cache/kvscope and your own presets to ~/.config/kvscope; those are yours and stay.
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true  # bash 5.2: a literal & in a path stays literal

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
check=0
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" = 0 ] && [ -n "${SUDO_USER:-}" ]; then
    echo "install.sh: this installs for one user and needs no root; run it as $SUDO_USER, without sudo" >&2
    exit 2
fi
[ -n "${HOME:-}" ] && [ -d "$HOME" ] || { echo "install.sh: HOME is not a folder" >&2; exit 2; }
# A relative HOME would make the launcher a symlink relative to ~/.local/bin: dangling from the start.
case "$HOME" in
    /*) ;;
    *) echo "install.sh: HOME ($HOME) is not an absolute path; set it to your home folder's full path" >&2; exit 2 ;;
esac

[ -f "$here/VERSION" ] || { echo "install.sh: $here/VERSION is missing: unpack the whole archive" >&2; exit 1; }
version=$(cat "$here/VERSION")
bundle="$here/kvscope"
[ -x "$bundle/kvscope" ] || { echo "install.sh: $bundle/kvscope is missing: unpack the whole archive" >&2; exit 1; }

# The XDG spec makes a relative XDG_DATA_HOME invalid, to be ignored (the install would land in the
# folder this was run from, with a launcher that points nowhere).
data_home="${XDG_DATA_HOME:-}"
case "$data_home" in
    /*) ;;
    '') data_home="$HOME/.local/share" ;;
    *) echo "note: XDG_DATA_HOME ($data_home) is not an absolute path; ignored, as the XDG spec says"
       data_home="$HOME/.local/share" ;;
esac
root="$data_home/kvscope"
target="$root/$version"
bin_dir="$HOME/.local/bin"
link="$bin_dir/kvscope"
apps="$data_home/applications"
desktop="$apps/kvscope.desktop"
icon="$target/_internal/kvscope/resources/kvscope.svg"

# The menu entry's Exec= quotes the launcher's path (% doubled there). A path with characters that
# the Desktop Entry spec makes ambiguous inside quotes is refused rather than half-escaped; a line
# break would also split the menu entry and the manifest uninstall.sh reads line by line.
case "$target" in
    *'"'* | *'`'* | *'$'* | *'\'*)
        echo "install.sh: the install path $target contains one of \" \` \$ \\; set XDG_DATA_HOME to a plainer folder" >&2
        exit 2 ;;
esac
case "$target$link" in
    *$'\n'* | *$'\r'*)
        echo "install.sh: the install path or HOME contains a line break; set XDG_DATA_HOME (and HOME) to a plainer folder" >&2
        exit 2 ;;
esac

for folder in "$root" "$bin_dir" "$apps"; do
    if ! made=$(mkdir -p -- "$folder" 2>&1); then
        # "Not a directory" names the folder asked for; the user needs the file in its way
        in_the_way=$folder
        while [ "$in_the_way" != / ] && { [ ! -e "$in_the_way" ] || [ -d "$in_the_way" ]; }; do
            in_the_way=$(dirname "$in_the_way")
        done
        if [ "$in_the_way" != / ]; then
            echo "install.sh: cannot create the folder $folder: $in_the_way is a file, not a folder" >&2
        else
            echo "install.sh: cannot create the folder $folder: ${made##*: }" >&2
        fi
        exit 2
    fi
done

# 1. the bundle, copied beside the final place and moved in, so a failed copy leaves nothing half-done
staging=$(mktemp -d "$root/.installing-$version.XXXXXX")
trap 'rm -rf "$staging"' EXIT
cp -a "$bundle/." "$staging/"
cp "$here/uninstall.sh" "$staging/uninstall.sh"
chmod 755 "$staging/uninstall.sh" "$staging/kvscope"
if [ -e "$target" ]; then
    echo "replacing the installed kvscope $version"
    rm -rf "$target"
fi
mv "$staging" "$target"
trap - EXIT
[ -f "$icon" ] || { echo "install.sh: the bundle has no icon at $icon" >&2; exit 1; }

# 2. the launcher on PATH
if [ -e "$link" ] && [ ! -L "$link" ]; then
    echo "install.sh: $link exists and is not a symlink; leaving it alone" >&2
    link_made=0
else
    ln -sfn "$target/kvscope" "$link"
    link_made=1
fi

# 3. the menu entry
exec_quoted=${target//%/%%}/kvscope
template=$(<"$here/kvscope.desktop.in")
template=${template//@EXEC_QUOTED@/$exec_quoted}
template=${template//@EXEC@/$target/kvscope}
template=${template//@ICON@/$icon}
template=${template//@VERSION@/$version}
template=${template//@TARGET@/$target}
printf '%s\n' "$template" > "$desktop.tmp"
chmod 644 "$desktop.tmp"
mv "$desktop.tmp" "$desktop"

# 4. what uninstall.sh removes, exactly
{
    echo "version=$version"
    echo "target=$target"
    [ "$link_made" = 1 ] && echo "link=$link"
    echo "desktop=$desktop"
} > "$target/install-manifest"

echo "kvscope $version installed in $target"
echo "  launcher:   $link"
echo "  menu entry: $desktop"
echo "  uninstall:  $target/uninstall.sh"
case ":$PATH:" in
    *":$bin_dir:"*) ;;
    *) echo "note: $bin_dir is not on your PATH; add it, or start kvscope from the menu" ;;
esac

if [ "$check" = 1 ]; then
    "$target/kvscope" --self-test
fi
