"""Every answer ``rainierd top`` reads is untrusted input: ``check`` holds it
against the read API's JSON Schema before anything draws from it, so the
screens can trust every type they read, and a broken or hostile monitor
costs one banner line (``BAD ANSWER <path>: <why>``), never a traceback.

The schema is the one the monitor's documents are tested against
(docs/api.schema.json, docs/actions.schema.json), shipped with the package
(``schemas/``, package data: a unit test keeps the copies equal), and
compiled once into nested checks for the subset of JSON Schema those files
use (``type``, ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``minItems``, ``maxItems``,
``minimum``, ``maximum``, ``exclusiveMinimum``, ``pattern``, ``$ref``); a
keyword outside it fails the compile, so the schema cannot grow a rule this
module would silently skip.  Not the ``jsonschema`` package: it is not a
dependency of the ``top`` extra (it would bring four more), it is 17x slower
on the heat map's 7,800 rows at ``rainier`` (443 ms of CPU against 26 ms;
``python -m benchmarks top-answers``), and it would still need the rules
below, which a schema written for the server does not state.

What is read differently from the schema, on purpose (docs/top.md):

- forward compatibility: a field the schema does not know (a newer
  monitor's) is left out of what ``check`` returns, whatever it holds,
  where the schema says ``additionalProperties: false`` (that is the
  server's promise, tested server-side); a value outside an ``enum`` (a new
  state or kind) is kept as it is spelled, if it has an enum member's type;
  ``const`` (a schema version) is enforced;
- what a terminal can be hurt by: every number finite, an integer within
  +-(2**53 - 1) (RFC 7493, I-JSON) and a number within a float's range;
  strings at most ``MAX_STRING_CHARS``, with no control character (C0, DEL,
  C1: an escape sequence would reach the terminal) and no lone surrogate
  (no terminal encoding takes one); lists at most ``MAX_ITEMS`` where the
  schema sets no bound; an integer spelled ``2.0`` is read as ``2``.

Nesting is bounded by the parser (source.py) and, for everything kept, by
the schema's own depth (six levels of objects and lists at most, in the
advisories): an unknown field is never descended into.

::

    BadAnswerError  an answer refused: ``path`` (the request's), ``reason``
                    (one line: where in the document, and what is wrong; at
                    most 30 characters of a string the sender wrote)
    SchemaError     the packaged schema uses what this module does not read
                    (a bug, found by tests/unit/top/test_answers.py)
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final

from rainierd.errors import RainierdError

MAX_STRING_CHARS: Final = 1_024  # a hostname is at most 253, an advisory's reason one line
MAX_ITEMS: Final = 10_000  # the read API's own bound on a page (docs/api.md), for lists the schema leaves open
MAX_INTEGER: Final = 2**53 - 1  # I-JSON (RFC 7493 §2.2): beyond it, integers do not survive every JSON reader
_MAX_REASON_CHARS: Final = 160
_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_ANNOTATIONS: Final = frozenset({"title", "description", "$schema", "$id", "$comment", "$defs"})
_KEYWORDS: Final = _ANNOTATIONS | {"type", "enum", "const", "properties", "required", "additionalProperties",
                                   "items", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum",
                                   "pattern", "$ref"}
# JSON's kinds as json.loads returns them (bool before int: True is an int to Python, not to JSON).
_KIND: Final[Mapping[type, str]] = {str: "string", float: "number", int: "integer", bool: "boolean",
                                    type(None): "null", dict: "object", list: "array"}
_SPELLED: Final = {"string": "a string", "number": "a number", "integer": "an integer", "boolean": "a boolean",
                   "null": "null", "object": "an object", "array": "a list"}

Check = Callable[[Any], Any]


class BadAnswerError(RainierdError):
    """An answer at ``path`` refused: ``reason`` says where and why, in one line."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"BAD ANSWER {path}: {reason}")
        self.path = path
        self.reason = reason


class SchemaError(RainierdError):
    """The schema uses a keyword or form this module does not read."""


class _RefusedError(Exception):
    """Raised by a check; each container on the way out adds where (the outermost last)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.where: list[str | int] = []


def one_line(text: str, limit: int = _MAX_REASON_CHARS) -> str:
    """Return ``text`` safe for one line of a terminal: control characters as ``?``, at most ``limit``."""
    text = _UNSAFE.sub("?", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(path: list[str | int]) -> str:
    out = ""
    for step in reversed(path):
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return one_line(out, 60)


def _number_text(value: float) -> str:
    return f"{value:.6g}"


class _Node:
    """One compiled schema node: the check of each Python type it admits (None: taken as it is)."""

    __slots__ = ("by_type", "expected")

    def __init__(self) -> None:
        self.by_type: dict[type, Check | None] = {}
        self.expected = ""

    def __call__(self, value: Any) -> Any:
        handler = self.by_type.get(type(value), _refuse)
        if handler is None:
            return value
        if handler is _refuse:
            raise self.refusal(value)
        return handler(value)

    def refusal(self, value: Any) -> _RefusedError:
        """Return the refusal of ``value``, of a type this node does not admit."""
        got = _SPELLED.get(_KIND.get(type(value), ""), type(value).__name__)
        return _RefusedError(f"{got} where {self.expected} belongs")


class _Compiler:
    """Compiles one schema file's nodes; a ``$ref`` to ``#/$defs/<name>`` is compiled once."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs", {})
        self.compiled: dict[str, _Node] = {}

    def ref(self, target: str) -> _Node:
        """Return the node of ``#/$defs/<name>``."""
        name = target.removeprefix("#/$defs/")
        if name == target or name not in self.defs:
            raise SchemaError(f"$ref {target!r} is not a definition of this schema")
        if name not in self.compiled:
            self.compiled[name] = compiled = _Node()  # before its body: a definition may refer to itself
            self.fill(compiled, self.defs[name])
        return self.compiled[name]

    def node(self, node: Mapping[str, Any]) -> _Node:
        """Return the compiled ``node``."""
        if "$ref" in node:
            if node.keys() - _ANNOTATIONS - {"$ref"}:
                raise SchemaError("$ref beside other keywords")
            return self.ref(node["$ref"])
        compiled = _Node()
        self.fill(compiled, node)
        return compiled

    def fill(self, compiled: _Node, node: Mapping[str, Any]) -> None:
        """Compile ``node`` into ``compiled``."""
        if unknown := node.keys() - _KEYWORDS:
            raise SchemaError(f"keywords this validator does not read: {sorted(unknown)}")
        if "$ref" in node:
            target = self.node(node)
            compiled.by_type, compiled.expected = target.by_type, target.expected
            return
        kinds = self._kinds(node)
        for kind in kinds:
            compiled.by_type.update(self._handlers(kind, node, number="number" in kinds))
        compiled.expected = " or ".join(_SPELLED[k] for k in kinds)
        if "const" in node:  # a schema version: a newer one may mean other things
            const = node["const"]
            compiled.by_type = {t: _constant(handler, const) for t, handler in compiled.by_type.items()}

    def _kinds(self, node: Mapping[str, Any]) -> list[str]:
        """The JSON kinds ``node`` admits: its ``type``, or those of its ``enum``'s or ``const``'s values."""
        if "type" in node:
            kinds = [node["type"]] if isinstance(node["type"], str) else list(node["type"])
        elif "enum" in node or "const" in node:
            values = node["enum"] if "enum" in node else [node["const"]]
            kinds = list(dict.fromkeys(_KIND[type(v)] for v in values))
        else:
            raise SchemaError(f"a node without a type: {sorted(node)}")
        if unknown := set(kinds) - _SPELLED.keys():
            raise SchemaError(f"unknown types {sorted(unknown)}")
        return kinds

    def _handlers(self, kind: str, node: Mapping[str, Any], *, number: bool) -> dict[type, Check | None]:
        """The check of each Python type json.loads gives for JSON kind ``kind`` (``number``: the node admits
        any number, so an integer is one)."""
        if kind == "object":
            return {dict: self._object(node)}
        if kind == "array":
            return {list: self._array(node)}
        if kind == "string":
            return {str: _string(node.get("pattern"))}
        if kind == "number":
            return {float: _float(node, integral=False), int: _int(node, sys.float_info.max)}
        if kind == "integer":
            integers: dict[type, Check | None] = {int: _int(node, MAX_INTEGER)}
            if not number:  # else a float is the number's
                integers[float] = _float(node, integral=True)
            return integers
        return {bool: None} if kind == "boolean" else {type(None): None}

    def _object(self, node: Mapping[str, Any]) -> Check:
        properties = {name: self.node(sub) for name, sub in node.get("properties", {}).items()}
        order = tuple(node.get("required", ()))
        required = frozenset(order)
        extra = node.get("additionalProperties", False)
        others = None if isinstance(extra, bool) else self.node(extra)
        key_check = _string(None)

        def check(value: dict[str, Any]) -> dict[str, Any]:
            if not value.keys() >= required:
                missing = [name for name in order if name not in value]
                raise _RefusedError(f"{missing[0]} missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1
                                                          else ""))
            out: dict[str, Any] = {}
            for key, item in value.items():
                sub = properties.get(key)
                if sub is None:
                    if others is None:
                        continue  # a field this schema does not know (a newer monitor's): left out
                    if len(out) >= MAX_ITEMS:
                        raise _RefusedError(f"more than {MAX_ITEMS:,} entries")
                    key_check(key)
                    sub = others
                handler = sub.by_type.get(type(item), _refuse)  # the node's own dispatch, inlined: the hot loop
                if handler is None:
                    out[key] = item
                    continue
                try:
                    if handler is _refuse:
                        raise sub.refusal(item)
                    out[key] = handler(item)
                except _RefusedError as exc:
                    exc.where.append(key)
                    raise
            return out

        return check

    def _array(self, node: Mapping[str, Any]) -> Check:
        items = self.node(node["items"]) if "items" in node else None
        most = node.get("maxItems", MAX_ITEMS)
        least = node.get("minItems", 0)

        def check(value: list[Any]) -> list[Any]:
            if not least <= len(value) <= most:
                raise _RefusedError(f"{len(value):,} items where {least:,} to {most:,} belong")
            if items is None:
                return value
            out = []
            for index, item in enumerate(value):
                try:
                    out.append(items(item))
                except _RefusedError as exc:
                    exc.where.append(index)
                    raise
            return out

        return check


def _constant(handler: Check | None, const: Any) -> Check:
    def check(value: Any) -> Any:
        checked = value if handler is None else handler(value)
        if checked != const:
            raise _RefusedError(f"{one_line(repr(checked), 30)} where {const!r} belongs")
        return checked

    return check


def _range(node: Mapping[str, Any]) -> Callable[[float], None] | None:
    """Return the check of ``node``'s bounds (None: it has none)."""
    if not node.keys() & {"minimum", "maximum", "exclusiveMinimum"}:
        return None
    low = node.get("minimum", -math.inf)
    high = node.get("maximum", math.inf)
    above = node.get("exclusiveMinimum", -math.inf)

    def in_range(value: float) -> None:
        if not (low <= value <= high and value > above):
            raise _RefusedError(f"{_number_text(value)} out of range")

    return in_range


def _float(node: Mapping[str, Any], *, integral: bool) -> Check:
    """A float: finite, within ``node``'s bounds; ``integral`` (an integer spelled 2.0): made an int."""
    in_range = _range(node)

    def check(value: float) -> float:
        if not math.isfinite(value):
            raise _RefusedError(f"{value} where a finite number belongs")
        if integral and not (value.is_integer() and abs(value) <= MAX_INTEGER):
            raise _RefusedError(f"{_number_text(value)} where an integer belongs")
        if in_range is not None:
            in_range(value)
        return int(value) if integral else value

    return check


def _int(node: Mapping[str, Any], bound: float) -> Check:
    """An int within +-``bound`` (MAX_INTEGER for an integer; for a number, a float's range) and ``node``'s
    bounds."""
    in_range = _range(node)

    def check(value: int) -> int:
        if not -bound <= value <= bound:
            raise _RefusedError(f"an integer beyond +-{bound:.3g}")
        if in_range is not None:
            in_range(value)
        return value

    return check


def _string(pattern: str | None) -> Check:
    """A string: at most MAX_STRING_CHARS, nothing a terminal would act on, of the form ``pattern``."""
    form = None if pattern is None else re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > MAX_STRING_CHARS:
            raise _RefusedError(f"a string of {len(value):,} characters (at most {MAX_STRING_CHARS:,})")
        if _UNSAFE.search(value):
            raise _RefusedError("a string with a control character or a lone surrogate")
        if form is not None and form.search(value) is None:
            raise _RefusedError(f"{one_line(repr(value), 30)} is not of the form {form.pattern}")
        return value

    return check


def _refuse(value: Any) -> Any:  # a marker in ``_Node.by_type``: no check admits this type
    raise AssertionError("never called")  # pragma: no cover


def compile_schema(root: Mapping[str, Any], name: str | None = None) -> Check:
    """Return the check of definition ``name`` of schema ``root`` (of the root itself when None); raise
    SchemaError if it uses what this module does not read."""
    compiler = _Compiler(root)
    if name is None:
        return compiler.node({k: v for k, v in root.items() if k != "$defs"})
    return compiler.ref(f"#/$defs/{name}")


@functools.cache
def schema(file: str) -> Mapping[str, Any]:
    """Return the packaged schema ``file`` (``api.schema.json``, ``actions.schema.json``)."""
    text = resources.files("rainierd.top").joinpath("schemas", file).read_text(encoding="utf-8")
    loaded: Mapping[str, Any] = json.loads(text)
    return loaded


# What top reads, by path: (schema file, definition; None for the file's root).
_ROUTES: Final = {
    "/api/v1/fleet": ("api.schema.json", "fleet"),
    "/api/v1/sites": ("api.schema.json", "sites"),
    "/api/v1/ultraservers": ("api.schema.json", "ultraservers"),
    "/api/v1/ultraservers/": ("api.schema.json", "ultraserver"),
    "/api/v1/jobs": ("api.schema.json", "jobs"),
    "/api/v1/jobs/": ("api.schema.json", "job"),
    "/api/v1/events": ("api.schema.json", "events"),
    "/api/v1/actions": ("actions.schema.json", None),
}


def definition_of(path: str) -> tuple[str, str | None]:
    """Return the schema file and definition of the answer at ``path``; raise KeyError for a path top does not
    read."""
    if path in _ROUTES:
        return _ROUTES[path]
    for one in ("/api/v1/ultraservers/", "/api/v1/jobs/"):  # one of them (a job id may hold slashes)
        if path.startswith(one) and len(path) > len(one):
            return _ROUTES[one]
    raise KeyError(path)


@functools.cache
def _check_of(file: str, name: str | None) -> Check:
    return compile_schema(schema(file), name)


def check(target: str, document: Any) -> Any:
    """Return ``document``, the answer at ``target``, as its schema describes it (fields it does not know left
    out, integers spelled as floats made ints).

    Raises BadAnswerError naming the path and, in one line, where and what is wrong.
    """
    file, name = definition_of(urllib.parse.urlsplit(target).path)
    try:
        return _check_of(file, name)(document)
    except _RefusedError as exc:
        where = _where(exc.where)
        raise BadAnswerError(path_of(target), one_line(f"{where}: {exc.what}" if where else exc.what)) from None


def path_of(target: str) -> str:
    """Return the path of request target ``target`` as a person reads it: decoded, one safe line."""
    return one_line(urllib.parse.unquote(urllib.parse.urlsplit(target).path), 80)
