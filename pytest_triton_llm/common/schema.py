"""Typed loading of TOML tables into frozen dataclasses.

Every problem becomes one `SchemaError` line naming the file, the entry and the
field, so a user can fix a data file without reading a traceback.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from .errors import TritonLLMError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class SchemaError(TritonLLMError, ValueError):
    """A data file does not match its schema; the message is one line."""


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def load_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SchemaError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(f"{path}: not valid TOML: {exc}") from None


def _describe(value: Any) -> str:
    name = _TYPE_NAMES.get(type(value))
    if name is None:
        name = "table" if isinstance(value, dict) else "array" if isinstance(value, list) else type(value).__name__
    return f"{name} {value!r}" if not isinstance(value, (dict, list)) else name


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"array of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "table"
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if dataclasses.is_dataclass(tp):
        return "table"
    return _TYPE_NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def _fail(entry: str, field: str, tp: Any, value: Any) -> SchemaError:
    return SchemaError(f"{entry}: field '{field}': expected {_type_name(tp)}, got {_describe(value)}")


def convert(value: Any, tp: Any, entry: str, field: str) -> Any:
    """Check `value` of `entry`'s `field` against the annotation `tp`; build dataclasses."""
    if tp is Any:  # passed through as written (checked by whoever reads it)
        return value
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1 and dataclasses.is_dataclass(options[0]) and isinstance(value, dict):
            return convert(value, options[0], entry, field)  # an optional table: the error inside it names its field
        for arg in options:
            try:
                return convert(value, arg, entry, field)
            except SchemaError:
                continue
        raise _fail(entry, field, tp, value)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed or type(value) is not type(allowed[0]):
            raise _fail(entry, field, tp, value)
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _fail(entry, field, tp, value)
        item_tp = typing.get_args(tp)[0]
        return tuple(convert(v, item_tp, entry, f"{field}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(entry, field, tp, value)
        val_tp = typing.get_args(tp)[1]
        return {k: convert(v, val_tp, entry, f"{field}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # (an annotation: a class, never an instance)
        if not isinstance(value, dict):
            raise _fail(entry, field, tp, value)
        return build(tp, value, entry, prefix=f"{field}.")
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    # exact type: bool is a subclass of int, and `true` is no max_batch_size
    if type(value) is not tp:
        raise _fail(entry, field, tp, value)
    return value


def build(cls: type, table: dict, entry: str, prefix: str = "") -> Any:
    """Build dataclass `cls` from `table`; unknown keys and missing fields are errors."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        allowed = ", ".join(sorted(fields))
        raise SchemaError(f"{entry}: unknown field '{prefix}{unknown[0]}' (allowed: {allowed})")
    kwargs = {}
    for name, field in fields.items():
        if name not in table:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise SchemaError(f"{entry}: missing field '{prefix}{name}' ({_type_name(hints[name])})")
            continue
        kwargs[name] = convert(table[name], hints[name], entry, prefix + name)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # cross-field checks in __post_init__
        raise SchemaError(f"{entry}: {exc}") from None
