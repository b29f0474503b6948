"""The reader behind `manifest_parse`'s tables: each part of `manifest.json` is described as data, not code.

A `Part` is one JSON object read into one dataclass: its `Key`s in the order they are read (the JSON types
each may hold, whether it may be left out, its field then keeping the dataclass's default, and the check that
turns a present value into the field's value), then the check between its keys, if it has one. The first
problem found is raised as a `ManifestError` that names the key ("files[0].size must be >= 0") and says to
re-export.

The standard library, not a validation library (`python -X importtime`, best of 7): the manifest modules
import in ~24 ms (the one module before the split: ~21 ms). pydantic 2.14 is already installed through
typer 0.29 (4.4 MB, pydantic-core 5.3 MB, annotated-types, typing-inspection), but a pydantic copy of these
dataclasses takes ~82 ms to import; msgspec 0.23 is small (0.23 MB wheel, 0.76 MB installed, no
dependencies; a msgspec copy ~15 ms, mostly `typing`, which this pays too). Neither pays for itself: both
report problems in their own words and order, so keeping these messages, which name the fix, would take a
translation layer on top, and the checks between parts (`manifest_checks`) stay hand-written either way.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest_schema import MANIFEST_NAME

Kind = type | tuple[type, ...]
Check = Callable[[Any, str], Any]  # (value, where) -> the field's value; raises `fail(where, ...)`
NUMBER = (int, float)  # a JSON number, read as a float (`as_float`)
NULLABLE_STR = (str, type(None))


def fail(where: str, problem: str) -> ManifestError:
    return ManifestError(f"{MANIFEST_NAME}: {where} {problem}; re-export the folder with onnxformer")


@dataclass(frozen=True)
class Key:
    """One key of a JSON object. `kind`: the types its value may have (None: any, `then` judges it);
    `then`: checks a present value and returns the field's value (None: the value as it is); `optional`:
    when the key may go unwritten, its field keeping the dataclass's default ("absent", or "absent or
    null"); None: the key is required."""

    name: str
    kind: Kind | None
    then: Check | None = None
    optional: Literal["absent", "absent or null"] | None = None


@dataclass(frozen=True)
class Part:
    """A JSON object read into `cls` through `keys`, then `check(part, where)`, which raises on a problem
    between its keys. A `nullable` part reads null as None. `problem`: what a value that is not an object
    is told."""

    cls: type
    keys: tuple[Key, ...]
    check: Callable[[Any, str], None] | None = None
    nullable: bool = False
    problem: str | None = None

    def __call__(self, item: Any, where: str) -> Any:
        if item is None and self.nullable:
            return None
        problem = self.problem or ("must be an object or null" if self.nullable else "must be an object")
        part = self.cls(**read_object(item, self.keys, where, problem=problem))
        if self.check is not None:
            self.check(part, where)
        return part


def read_object(
    item: Any, keys: tuple[Key, ...], where: str, *, problem: str = "must be an object"
) -> dict[str, Any]:
    """The fields named by `keys`, read from the JSON object `item` (`where` names it in messages)."""
    if not isinstance(item, dict):
        raise fail(where, problem)
    fields: dict[str, Any] = {}
    for key in keys:
        at = f"{where}.{key.name}" if where else key.name
        value = item.get(key.name)
        if key.name not in item or (value is None and key.optional == "absent or null"):
            if key.optional is None:
                raise fail(at, "is missing")
            continue
        if key.kind is not None:
            typed(value, key.kind, at)
        fields[key.name] = value if key.then is None else key.then(value, at)
    return fields


def typed(value: Any, kind: Kind, where: str) -> Any:
    """`value`, refused unless it is of `kind`; bool is an int subclass, but a field typed int refuses it."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(t.__name__ for t in kinds)
        raise fail(where, f"must be {names}, got {type(value).__name__}")
    return value


# Checks of one value, for `Key.then`.


@dataclass(frozen=True)
class ListOf:
    """A JSON list whose items `read(item, where)` reads, as a tuple."""

    read: Check

    def __call__(self, items: list[Any], where: str) -> tuple[Any, ...]:
        return tuple(self.read(item, f"{where}[{i}]") for i, item in enumerate(items))


@dataclass(frozen=True)
class DictOf:
    """A JSON object whose values `read(item, where)` reads, by key."""

    read: Check

    def __call__(self, items: dict[str, Any], where: str) -> dict[str, Any]:
        return {str(key): self.read(item, f"{where}.{key}") for key, item in items.items()}


@dataclass(frozen=True)
class OneOf:
    """A value that must be one of `choices`."""

    choices: tuple[str, ...]

    def __call__(self, value: str, where: str) -> str:
        if value not in self.choices:
            raise fail(where, f"must be one of {self.choices}, got {value!r}")
        return value


def as_float(value: int | float, where: str) -> float:
    return float(value)


def to_tuple(value: list[Any], where: str) -> tuple[Any, ...]:
    return tuple(value)


def positive(value: int, where: str) -> int:
    if value <= 0:
        raise fail(where, f"must be a positive integer, got {value}")
    return value


def pattern(value: str, where: str) -> str:
    """A per-layer name: "{i}" stands for the layer."""
    if "{i}" not in value:
        raise fail(where, f"must be a name with '{{i}}' for the layer, got {value!r}")
    return value


def names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise fail(where, "must be a list of non-empty names")
    return tuple(value)


def numbers(values: dict[str, Any], where: str) -> dict[str, float]:
    """{output name: number}."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, NUMBER):
            raise fail(f"{where}.{name}", "must be a number")
    return {name: float(value) for name, value in values.items()}
