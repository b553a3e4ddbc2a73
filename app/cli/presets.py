"""`kvscope presets [KIND]`: the built-in (and the user's own) presets, one line each."""

from __future__ import annotations

from kvscope.engine.config import ConfigError
from kvscope.app.cli.output import shown
from kvscope.app.lab.presets import (KINDS, THIS_MACHINE, builtin_preset_names, load_hardware, load_model, load_workload,
                                     preset_names, user_preset_names, user_presets_root)
from kvscope.app.lab.said_paths import said_path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("presets", help="list the built-in presets")
    parser.add_argument("kind", nargs="?", choices=KINDS)
    parser.set_defaults(func=run)


def run(args) -> int:
    kinds = [args.kind] if args.kind else list(KINDS)
    loaders = {"models": load_model, "hardware": load_hardware, "workloads": load_workload}
    lines = []  # all of them before any is printed: a refused config folder leaves no half listing above its line
    for kind in kinds:
        lines.append(f"{kind}:")
        for name in preset_names(kind):
            try:
                description = loaders[kind](name).description
            except ConfigError as exc:
                description = f"(invalid: {exc})"
            lines.append(f"  {shown(name):<22} {shown(description)}")  # a user's file named with ESC does not clear the screen
        lines += shadowed_lines(kind)
    print("\n".join(lines))
    return 0


def shadowed_lines(kind: str) -> list[str]:
    """A user's preset file with a built-in preset's name (a copy of llama-3-8b.toml, edited where it
    lay) is never read: the built-in is looked up first. `kvscope presets` listed the name once, with
    the built-in's description, and `math --model llama-3-8b` ran the built-in: said here at least."""
    builtin = set(builtin_preset_names(kind)) | ({THIS_MACHINE} if kind == "hardware" else set())
    return [f"  {shown(name):<22} (your {shown(said_path(user_presets_root() / kind / f'{name}.toml'))} is not read: "
            "a built-in preset has its name and is used instead; rename the file to use it)"
            for name in user_preset_names(kind) if name in builtin]
