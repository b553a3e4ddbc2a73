"""`kvscope presets [KIND]`: the built-in (and the user's own) presets, one line each."""

from __future__ import annotations

from kvscope.engine.config import ConfigError
from kvscope.app.cli.output import shown
from kvscope.app.lab.presets import KINDS, load_hardware, load_model, load_workload, preset_names


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
    print("\n".join(lines))
    return 0
