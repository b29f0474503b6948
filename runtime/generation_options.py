"""The options of one generation call, declared once: `GenerationOptions`.

Each field is one option: its name, type and default, and in its metadata (`Option`) what it does, the
values it takes and the tasks that take it. Every surface takes its options from here:

    the model classes    TextGenerator.generate(prompt, temperature=0) builds a GenerationOptions
                         (`GenerationOptions.of`), or takes one: generate(prompt, options)
    HTTP                 the JSON fields of `onnxformer serve` (serving/app.py)
    the commands         the flags of generate, seq2seq and batch (cli/options.py)
    Node                 hosts/node/src/options.js: the camelCase name of each field
                         (tests/test_node_options.py holds that table equal to these fields)

A value outside its range is refused when the options are built, and an option of another task by
`check`, each with an InputError whose `field` is the option's name. An option left at None takes the
export's default, the value of the same name in its manifest `generation` (`resolve`).
"""

import numbers
from collections.abc import Collection, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, get_args, get_origin

from onnxformer.runtime.errors import ConfigError, InputError, ManifestError
from onnxformer.runtime.manifest import GenerationDefaults
from onnxformer.runtime.sampling import MAX_TEMPERATURE, SamplingConfig

DECODING = ("generate", "seq2seq")  # the manifest tasks that generate tokens
# The sampling options, which beam search (it picks deterministically) refuses.
SAMPLING = ("temperature", "top_k", "top_p", "seed")
MAX_LENGTH_PENALTY = 10.0  # length ** penalty must stay a finite, non-zero float for any context length
_NO_TOKENS = "an encode export embeds texts and generates no tokens"
_BEAMS = "beam search runs on seq2seq exports only"


@dataclass(frozen=True)
class Option:
    """What one option is, for every surface that offers it."""

    help: str  # one sentence a newcomer understands (--help, docs); no markup
    tasks: tuple[str, ...]  # the manifest tasks that take it
    why_not: str  # why the other tasks refuse it, for their error message
    low: float | None = None  # the smallest value allowed (for a list: of each item)
    high: float | None = None  # the largest
    above_low: bool = False  # `low` itself is not allowed (top_p > 0)
    manifest: bool = False  # None takes the export's default (manifest `generation`, the same name)


def _option(default: Any, **metadata: Any) -> Any:
    return field(default=default, metadata={"option": Option(**metadata)})


@dataclass(frozen=True)
class GenerationOptions:
    """How to generate (generate, seq2seq) and, for an encode export, whether to cut long texts.

    Build one with keywords (`GenerationOptions(temperature=0, max_new_tokens=20)`); lists are kept as
    tuples. Each value is checked here against its field's range; `check(task)` refuses the options a
    task does not take, saying why; `resolve(defaults)` fills the unset ones from the export's manifest.
    """

    max_new_tokens: int | None = _option(
        None,
        help="Most tokens to generate (default: the export's).",
        tasks=DECODING,
        why_not=_NO_TOKENS,
        low=0,
        manifest=True,
    )
    temperature: float | None = _option(
        None,
        help="0 = greedy; higher = more random (default: the export's).",
        tasks=DECODING,
        why_not=_NO_TOKENS,
        low=0.0,
        high=MAX_TEMPERATURE,
        manifest=True,
    )
    top_k: int | None = _option(
        None,
        help="Sample from the k likeliest tokens; 0 = all (default: the export's).",
        tasks=DECODING,
        why_not=_NO_TOKENS,
        low=0,
        manifest=True,
    )
    top_p: float | None = _option(
        None,
        help="Sample from the smallest set of tokens whose probability reaches p; 1 = all "
        "(default: the export's).",
        tasks=DECODING,
        why_not=_NO_TOKENS,
        low=0.0,
        high=1.0,
        above_low=True,
        manifest=True,
    )
    seed: int | None = _option(
        None,
        help="Seed for sampling; the same seed gives the same text (default: fresh entropy).",
        tasks=DECODING,
        why_not=_NO_TOKENS,
        low=0,
    )
    stop: tuple[str, ...] | None = _option(
        None,
        help="End the text before the first of these strings.",
        tasks=("generate",),
        why_not="stop strings cut a generated continuation; a seq2seq output ends at its stop tokens",
    )
    stop_tokens: tuple[int, ...] | None = _option(
        None,
        help="Token ids that end an output, left out of it (default: the export's end token).",
        tasks=DECODING,
        why_not=_NO_TOKENS,
        low=0,
        manifest=True,
    )
    num_beams: int = _option(
        1,
        help="Beam search width; 1 = no beam search (greedy or sampling).",
        tasks=("seq2seq",),
        why_not=_BEAMS,
        low=1,
    )
    length_penalty: float = _option(
        1.0,
        help="Beam search ranks outputs by log-probability / length^penalty (1 = average, 0 = sum).",
        tasks=("seq2seq",),
        why_not=_BEAMS,
        low=-MAX_LENGTH_PENALTY,
        high=MAX_LENGTH_PENALTY,
    )
    truncate: bool = _option(
        True,
        help="Cut a text longer than the export reads to its first tokens, as sentence-transformers "
        "does (off: refuse it).",
        tasks=("encode",),
        why_not="generate and seq2seq refuse a text longer than the model's context",
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            object.__setattr__(self, item.name, _checked(item, getattr(self, item.name)))
        if self.num_beams > 1 and any(getattr(self, name) is not None for name in SAMPLING):
            raise InputError(
                "beam search chooses tokens deterministically; leave temperature, top_k, top_p and seed "
                "unset, or use num_beams=1 to sample",
                field="num_beams",
            )

    @classmethod
    def of(cls, options: "GenerationOptions | None" = None, /, **overrides: Any) -> "GenerationOptions":
        """`options` (default: none set) with `overrides` replacing fields by name: how the model classes'
        keyword arguments become one value."""
        unknown = sorted(set(overrides) - set(OPTIONS))
        if unknown:
            raise InputError(
                f"{unknown[0]!r} is not a generation option; the options are {', '.join(OPTIONS)}",
                field=unknown[0],
            )
        if options is None:
            return cls(**overrides)
        if not isinstance(options, GenerationOptions):
            raise InputError(f"options must be a GenerationOptions, got {type(options).__name__}")
        return replace(options, **overrides)

    def given(self) -> list[str]:
        """The names of the options set to something other than their default."""
        return [item.name for item in fields(self) if getattr(self, item.name) != item.default]

    def check(self, task: str, *, what: str | None = None) -> "GenerationOptions":
        """These options, if `task` (a manifest task) takes every one that is set; else an InputError
        naming the first other one and why. `what` names the task in the message (default: `task`)."""
        what = what or task
        for name in self.given():
            if task not in OPTIONS[name].tasks:
                takes = ", ".join(names_for(task)) or "none"
                raise InputError(
                    f"{name}: not an option of {what} ({OPTIONS[name].why_not}); {what} takes: {takes}",
                    field=name,
                )
        return self

    def resolve(self, defaults: GenerationDefaults) -> "GenerationOptions":
        """These options with each unset one that an export records taken from its manifest `generation`
        (beam search leaves the sampling ones unset: it takes none)."""
        unset = {
            name: getattr(defaults, name)
            for name, option in OPTIONS.items()
            if option.manifest
            and getattr(self, name) is None
            and not (self.num_beams > 1 and name in SAMPLING)
        }
        try:
            return replace(self, **unset)
        except InputError as error:
            raise ManifestError(f"manifest.json: generation.{error}; re-export the folder") from None

    def sampling(self) -> SamplingConfig:
        """How to choose each token (after `resolve`, which sets temperature, top_k and top_p)."""
        temperature, top_k, top_p = self.temperature, self.top_k, self.top_p
        if temperature is None or top_k is None or top_p is None:
            raise ConfigError(
                f"sampling needs temperature, top_k and top_p, got {temperature!r}, {top_k!r}, {top_p!r}; "
                "resolve the options with the export's defaults first"
            )
        return SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, seed=self.seed)


OPTIONS: dict[str, Option] = {item.name: item.metadata["option"] for item in fields(GenerationOptions)}


def value_kind(item: Field[Any]) -> tuple[str, bool]:
    """What a field holds, from its annotation: "int", "number", "bool", "strings" or "ints" (a tuple
    of them), and whether None is allowed (an unset option)."""
    args = get_args(item.type)
    optional = type(None) in args
    base = next(arg for arg in args if arg is not type(None)) if optional else item.type
    if get_origin(base) is tuple:
        return ("strings" if get_args(base)[0] is str else "ints"), optional
    kinds: dict[object, str] = {bool: "bool", int: "int", float: "number"}
    return kinds[base], optional


KINDS: dict[str, tuple[str, bool]] = {item.name: value_kind(item) for item in fields(GenerationOptions)}
DEFAULTS: dict[str, Any] = {item.name: item.default for item in fields(GenerationOptions)}


def names_for(task: str) -> tuple[str, ...]:
    """The options `task` (a manifest task: generate, encode, seq2seq) takes, in field order."""
    return tuple(name for name, option in OPTIONS.items() if task in option.tasks)


def node_name(name: str) -> str:
    """An option's name in the Node host: camelCase (max_new_tokens -> maxNewTokens)."""
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def describe(name: str) -> str:
    """The values an option takes, as its error messages say them: "a number in (0, 1]"."""
    option = OPTIONS[name]
    low, high = option.low, option.high
    if low is not None and high is not None:
        span = f" in {'(' if option.above_low else '['}{low:g}, {high:g}]"
    elif low is not None:
        span = f" {'>' if option.above_low else '>='} {low:g}"
    else:
        span = ""
    return {
        "bool": "true or false",
        "int": f"an integer{span}",
        "number": f"a number{span}",
        "strings": "a list of strings, each non-empty",
        "ints": f"a list of token ids (integers{span})",
    }[KINDS[name][0]]


def _checked(item: Field[Any], value: Any) -> Any:
    """`value` for the field `item` in its canonical type (lists as tuples), or an InputError."""
    kind, optional = KINDS[item.name]
    option = OPTIONS[item.name]
    if value is None and optional:
        return None
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and _integer(value) and _within(value, option):
        return int(value)
    if kind == "number" and _number(value) and _within(value, option):
        return float(value)
    if kind == "strings" and _listed(value) and all(isinstance(s, str) and s for s in value):
        return tuple(value)
    if kind == "ints" and _listed(value) and all(_integer(t) and _within(t, option) for t in value):
        return tuple(int(t) for t in value)
    shown = repr(value)
    shown = shown if len(shown) <= 80 else f"{shown[:77]}..."
    raise InputError(f"{item.name} must be {describe(item.name)}, got {shown}", field=item.name)


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)  # numpy integers too


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _within(value: Any, option: Option) -> bool:
    """Whether `value` is in the option's range (NaN never is)."""
    if option.low is not None and not (value > option.low if option.above_low else value >= option.low):
        return False
    return option.high is None or value <= option.high


def _listed(value: Any) -> bool:
    """A list, tuple, set or 1-D array: not a str, bytes, mapping or 0-d array."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Collection):
        return False
    return getattr(value, "ndim", 1) == 1
