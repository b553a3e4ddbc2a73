"""`kvscope scenarios`: the guided scenarios, each a question, a comparison on one workload and
the answer measured (run one with `kvscope compare --scenario NAME`)."""

from __future__ import annotations

import json

from kvscope.engine.config import ConfigError
from kvscope.app.lab.scenarios import load_scenario, scenario_names
from kvscope.app.cli.lessons import readable_lesson


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("scenarios",
                                   help="list the guided scenarios (each a question, a comparison, a reveal)")
    parser.add_argument("--json", action="store_true", help="print them as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    entries = []
    for name in scenario_names():
        try:
            entries.append(load_scenario(name))
        except ConfigError as exc:
            entries.append(exc)
    if args.json:
        print(json.dumps([{**e.to_dict(), "from_the_lesson": readable_lesson(e.seed_lesson)}
                          if not isinstance(e, ConfigError) else {"invalid": str(e)} for e in entries],
                         indent=2))
        return 0
    print("Guided scenarios: a question, a comparison on one workload, the answer measured")
    print("(kvscope compare --scenario NAME)")
    width = max((len(e.name) for e in entries if not isinstance(e, ConfigError)), default=0)
    for entry in entries:
        if isinstance(entry, ConfigError):
            print(f"\n  (invalid: {entry})")
            continue
        print(f"\n{entry.order:>2}  {entry.name:<{width}}  {entry.backend:<9}  {entry.title}")
        print(f"    {entry.question}")
        print(f"    {len(entry.configs)} configurations: {'; '.join(entry.labels)}")
    return 0
