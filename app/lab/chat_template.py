"""A model's chat template, rendered. A chat template is a program that came with the model folder.
It is rendered here, in a jinja2 sandbox set up as transformers sets up its own (the same filters,
globals and variables, so the prompt is the one apply_chat_template gives), with bounds transformers
does not have: on the steps it runs, the items its ranges yield, the text it writes and the size of
any value it makes. A template that fails or crosses a bound is one ConfigError naming it, not a
jinja2 traceback, a loop of 10,000,000,000 steps or a string of gigabytes.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import threading
from pathlib import Path

from kvscope.engine.config import ConfigError

# A chat template renders a conversation in a few steps a message (SmolLM2's: 5, and 20 to start);
# 200,000 are tens of thousands of messages' worth, and a second or two when a template loops.
MAX_TEMPLATE_STEPS = 200_000
MAX_RANGE_ITEMS = 1_000_000  # all of one render's range() calls together
# The text a render may write, and the size of any one value it makes: the conversation's own
# text four times over, and a MiB for the template's own words (a tool list, a system prompt).
MIN_TEMPLATE_TEXT = 1024**2
MAX_TEMPLATE_NUMBER = 100_000  # a width, a count or a repeat a template passes: indent(4), range(n)
# Real chat templates are 1 - 30 KB (tool-calling ones the longest); jinja2 compiles a long chain of
# operators in time that grows faster than its length (200 terms: 38 s), before any bound can act.
MAX_TEMPLATE_CHARS = 256 * 1024
MEASURE_EVERY_STEPS = 16  # the values a template holds, measured every few lines: each is 2.5 us of locals
# The conversations a template is tried on when it is loaded: one of them must render.
PROBES = ([{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello"}],
          [{"role": "user", "content": "Hello"}])


class TemplateBound(Exception):
    """A chat template crossed one of the bounds above."""


class _Budget:
    """One render's allowance: template steps, range items, and the largest text or list it may make."""

    def __init__(self, limit: int):
        self.limit = limit
        self.steps = 0
        self.range_items = 0

    def size(self, value, what: str):
        if isinstance(value, (str, list, tuple, dict)) and len(value) > self.limit:
            raise TemplateBound(f"{what} of {len(value):,} items, more than the {self.limit:,} a prompt of this "
                                "conversation needs")
        return value

    def number(self, value, what: str):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_TEMPLATE_NUMBER:
            raise TemplateBound(f"{what} is given {value:,}; a chat template needs no number past "
                                f"{MAX_TEMPLATE_NUMBER:,}")
        return value

    def range(self, *args):
        for arg in args:
            self.number(arg, "range()")
        items = range(*args)
        self.range_items += len(items)
        if self.range_items > MAX_RANGE_ITEMS:
            raise TemplateBound(f"its loops ask for more than {MAX_RANGE_ITEMS:,} range() items")
        return items


# A width in a format: printf's "%10.3f" (the % operator, the format filter) and str.format's "{:>10}".
_WIDTHS = re.compile(r"%[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?|\{[^{}]*?:[^{}]*?(\d+)[^{}]*\}")
# Methods and filters whose result grows with a number they are given, or with one input times another
_WIDENING_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs"}
_WIDENING_FILTERS = {"center", "indent", "wordwrap", "truncate", "batch", "slice", "tojson"}


def _check_widths(text) -> None:
    if not isinstance(text, str):
        return
    for match in _WIDTHS.finditer(text):
        for number in match.groups():
            if number == "*" or (number and int(number) > MAX_TEMPLATE_NUMBER):
                raise TemplateBound(f"a format asks for a width of {number}")


def _check_replace(text, old, new, budget: _Budget) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        made = len(text) + (text.count(old) if old else len(text) + 1) * len(new)
        if made > budget.limit:
            raise TemplateBound(f"a replace() would make {made:,} characters, more than the {budget.limit:,} a "
                                "prompt of this conversation needs")


def _check_join(items, separator, budget: _Budget) -> None:
    if isinstance(items, (list, tuple)) and isinstance(separator, str):
        made = sum(len(item) for item in items if isinstance(item, str)) + len(separator) * len(items)
        if made > budget.limit:
            raise TemplateBound(f"a join would make {made:,} characters, more than the {budget.limit:,} a prompt "
                                "of this conversation needs")


def _environment(budget_of):
    """transformers' chat template environment (utils/chat_template_utils.py), bounded. budget_of()
    is the running render's _Budget."""
    import functools

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """{% generation %}: transformers marks the assistant's tokens with it; its text is rendered as is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class BoundedCodeGenerator(jinja2.compiler.CodeGenerator):
        def visit_Concat(self, node, frame):  # `~` joins through the environment, which measures it first
            self.write("environment.bounded_concat((")
            for item in node.nodes:
                self.visit(item, frame)
                self.write(", ")
            self.write("))")

    class Bounded(ImmutableSandboxedEnvironment):
        # intercepted, these are also never folded at compile time ('x' * 10**10 is refused, not built)
        intercepted_binops = frozenset(("*", "**", "%", "+"))
        code_generator_class = BoundedCodeGenerator

        def call_binop(self, context, operator, left, right):
            budget = budget_of()
            if operator == "*":
                for seq, times in ((left, right), (right, left)):
                    if (isinstance(seq, (str, list, tuple)) and isinstance(times, int)
                            and len(seq) * max(times, 0) > budget.limit):
                        raise TemplateBound(f"it repeats a value {times:,} times, past the {budget.limit:,} items a "
                                            "prompt of this conversation needs")
                if isinstance(left, int) and isinstance(right, int) and \
                        abs(left).bit_length() + abs(right).bit_length() > 64 * MAX_TEMPLATE_NUMBER:
                    raise TemplateBound("it multiplies numbers past any a prompt needs")
            elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, type(left)) \
                    and len(left) + len(right) > budget.limit:
                raise TemplateBound(f"a + makes more than the {budget.limit:,} items a prompt of this conversation needs")
            elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                budget.number(right, "**")
                if abs(left).bit_length() * right > 64 * MAX_TEMPLATE_NUMBER:
                    raise TemplateBound(f"it raises a number of {abs(left).bit_length():,} bits to the power {right:,}")
            elif operator == "%":
                _check_widths(left)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own spelling
            budget = budget_of()
            name, owner = getattr(__obj, "__name__", ""), getattr(__obj, "__self__", None)
            if isinstance(owner, str):
                if name in _WIDENING_METHODS:
                    for value in (*args, *kwargs.values()):
                        budget.number(value, f"{name}()")
                elif name == "replace" and len(args) >= 2:
                    _check_replace(owner, args[0], args[1], budget)
                elif name == "join" and args:
                    _check_join(args[0], owner, budget)
            return budget.size(super().call(__context, __obj, *args, **kwargs), f"{name or 'a call'}() made a value")

        def bounded_concat(self, items):
            """`a ~ b ~ c`: measured before it is joined (one expression of 2,000 terms, each a MiB, is 2 GB)."""
            parts = [str(item) for item in items]
            if sum(map(len, parts)) > budget_of().limit:
                raise TemplateBound(f"a ~ joins more than the {budget_of().limit:,} characters a prompt of this "
                                    "conversation needs")
            return "".join(parts)

        def wrap_str_format(self, value):
            if getattr(value, "__name__", "") in ("format", "format_map"):
                _check_widths(getattr(value, "__self__", None))
            return super().wrap_str_format(value)

    def bounded_filter(name, function):
        @functools.wraps(function)  # keeps jinja2's pass_context / pass_environment marks
        def run(*args, **kwargs):
            budget = budget_of()
            values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment,
                                                            jinja2.nodes.EvalContext))]
            if name in _WIDENING_FILTERS:
                for value in (*values[1:], *kwargs.values()):
                    budget.number(value, f"the {name} filter")
            if name == "indent" and values and isinstance(values[0], str):
                width = values[1] if len(values) > 1 else kwargs.get("width", 4)
                width = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
                if len(values[0]) + width * (values[0].count("\n") + 1) > budget.limit:
                    raise TemplateBound(f"the indent filter would make more than {budget.limit:,} characters")
            elif name == "replace" and len(values) >= 3:
                _check_replace(values[0], values[1], values[2], budget)
            elif name == "join" and values:
                _check_join(values[0], values[1] if len(values) > 1 else kwargs.get("d", ""), budget)
            elif name == "format" and values:
                _check_widths(values[0])
            return budget.size(function(*args, **kwargs), f"the {name} filter made a value")

        return run

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return budget_of().size(dict(*args, **kwargs), "dict()")

        def fromkeys(self, *args, **kwargs):
            return budget_of().size(dict.fromkeys(*args, **kwargs), "dict.fromkeys()")

    class TemplateNamespace(jinja2.utils.Namespace):
        # what transformers' refuses (CPython's internals through dunder names), and values past the
        # budget: a namespace is where a template keeps a value between loop turns, to double it
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name, value in attrs.items():
                TemplateNamespace._check(name, value)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name, value)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name, value):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_': {name!r}")
            budget_of().size(value, f"namespace attribute {name!r}")

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.filters = {name: bounded_filter(name, function) for name, function in env.filters.items()}
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace)
    env.globals.pop("lipsum", None)  # jinja2's placeholder-text generator: no chat template needs it, and it is unbounded
    return env


def _template_data(value):
    """Plain JSON types, as transformers hands a template its inputs (no object's methods reach it)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, dict):
        return {str(k): _template_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_template_data(v) for v in value]
    return str(value)


class ChatTemplate:
    """A model's chat template, compiled in the bounded sandbox; render() gives the prompt or a
    ConfigError that starts with `source` (the file the template came from)."""

    def __init__(self, text: str, source: str, special_tokens: dict):
        self.source = source
        self.special_tokens = _template_data(dict(special_tokens))
        # per thread: the window's engine and a workload may render at once, each within its own budget
        self._local = threading.local()
        self._local.budget = _Budget(MIN_TEMPLATE_TEXT)  # compiling folds constants, within this one
        if len(text) > MAX_TEMPLATE_CHARS:
            raise ConfigError(f"{source} is {len(text):,} characters; a chat template has at most "
                              f"{MAX_TEMPLATE_CHARS:,}")
        try:
            self._template = _environment(lambda: self._local.budget).from_string(text)
        except Exception as exc:  # noqa: BLE001 - TemplateSyntaxError, a bound crossed when folding constants
            raise ConfigError(f"{source} cannot be read: {_said(exc)}") from None

    def render(self, messages: list[dict], conversation: str = "this conversation") -> str:
        messages = [{k: v for k, v in m.items() if v is not None} for m in _template_data(messages)]
        given = sum(len(str(v)) for m in messages for v in m.values())
        budget = self._local.budget = _Budget(MIN_TEMPLATE_TEXT + 4 * given)
        variables = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": True,
                     **self.special_tokens, "range": budget.range}
        parts, written = [], 0
        tracer = _StepCounter(budget)
        previous = sys.gettrace()
        sys.settrace(tracer.call)
        try:
            for part in self._template.generate(**variables):
                written += len(part)
                if written > budget.limit:
                    raise TemplateBound(f"it writes more than {budget.limit:,} characters for a conversation of "
                                        f"{given:,}")
                parts.append(part)
        except Exception as exc:  # noqa: BLE001 - any of it (a MemoryError, a RecursionError) is the template's doing
            raise ConfigError(f"{self.source} fails on {conversation}: {_said(exc)}") from None
        finally:
            sys.settrace(previous)
        return "".join(parts)


class _StepCounter:
    """A trace function on the template's own code (jinja2 compiles it to Python named "<template>"):
    every line it runs counts a step, so a loop over anything, range() or not, ends within the
    budget; and every few lines the values it holds are measured, a second line of defence behind
    the bounded operators (a text doubled line by line, {% set s = s ~ s %}, is refused at the join)."""

    def __init__(self, budget: _Budget):
        self.budget = budget

    def call(self, frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            return None
        self._measure(frame)
        return self.line

    def line(self, frame, event, arg):
        if event == "line":
            self.budget.steps += 1
            if self.budget.steps > MAX_TEMPLATE_STEPS:
                raise TemplateBound(f"it runs more than {MAX_TEMPLATE_STEPS:,} steps")
            if self.budget.steps % MEASURE_EVERY_STEPS == 0:  # every operator that grows a value is bounded itself
                self._measure(frame)
        return self.line

    def _measure(self, frame) -> None:
        for value in frame.f_locals.values():
            if isinstance(value, (str, list, tuple, dict)) and len(value) > self.budget.limit:
                self.budget.size(value, "a value it holds")


def _said(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "it recurses without end"
    if isinstance(exc, MemoryError):
        return "it needs more memory than this machine has"
    if isinstance(exc, ValueError) and "int_max_str_digits" in str(exc):  # Python's advice is not the user's to take
        return (f"it writes a whole number of more than {sys.get_int_max_str_digits():,} digits, past any a prompt "
                "holds")
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def template_source(path) -> str:
    """Where a model folder's chat template is read from, as an error names it."""
    if path is None:
        return "tokenizer_config.json's chat_template"
    path = Path(path)
    if (path / "chat_template.jinja").is_file():  # transformers 5 saves the template beside the config
        return str(path / "chat_template.jinja")
    return f"{path / 'tokenizer_config.json'}'s chat_template"
