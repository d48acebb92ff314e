"""The one name ``top`` prints for an entity: its canonical id (``s0/u1/n4/chip5``,
``s0/u1/n4/chip5/link0``, ``s0/u1/n4/efa6``; docs/ids.md, ``rainierd.fleet.ids``),
whatever shape the monitor's read API answers in.

The read API's contract (issue 37) is that every object carries ``"id"``, the
canonical string, and ``"index"``, the integer tools need.  A monitor of the
release before answers the integer as ``"id"`` (``"n4"`` for a node, ``"u1"``
for an UltraServer) and no ``"index"``: inside one UltraServer's document top
then builds the canonical id the way ``rainierd.fleet.ids`` does, from the
site, the node and the entity's place in its node (an UltraServer document
lists every chip, link and port of its present nodes, so a node's count of
each is the document's count over its nodes).  Nothing else in ``top`` looks
at the shape of an id: this adapter is the only place both shapes are known.
(Since the read API's schema names every entity by its canonical id, a
monitor's answer in the older shape is refused before it gets here
(``answers``); documents built by hand in the older shape still read the same.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rainierd.top.model import Document

# The UltraServer document's lists, and the entity kind each holds (as the metrics and events name them).
LISTS = {"chip": "chips", "neuronlink": "links", "efa": "ports", "node": "nodes"}


def number(text: object) -> int | None:
    """Return the number a short or canonical id ends in (``n4``, ``u1``, ``s0/u1/n4`` -> 4, 1, 4), or an integer
    id itself; None for anything else."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str) or not text:
        return None
    last = text.rsplit("/", 1)[-1].lstrip("sunchiplkefa")
    return int(last) if last.isdigit() else None


def index_of(entity: Document) -> int | None:
    """Return an entity's integer index: ``"index"`` where the API gives it, else its integer (or ``n4``) id."""
    index = entity.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    return number(entity.get("id"))


def is_canonical(ident: object) -> bool:
    """Whether ``ident`` is already a canonical id (a path from the site: ``s0/u1...``)."""
    return isinstance(ident, str) and ident.startswith("s") and "/" in ident


@dataclass(frozen=True, slots=True)
class Namer:
    """Canonical ids for the entities of one UltraServer document (``/api/v1/ultraservers/<id>``)."""

    prefix: str  # the UltraServer's canonical id: s0/u5
    chips_per_node: int
    links_per_node: int
    ports_per_node: int

    @classmethod
    def of(cls, document: Document) -> Namer:
        """The namer of an UltraServer document."""
        us = document["ultraserver"]
        ident = str(us["id"])
        prefix = ident if is_canonical(ident) else f"{us.get('site') or 's?'}/{ident}"
        nodes = max(1, len(document.get("nodes", ())))
        return cls(prefix, max(1, len(document.get("chips", ())) // nodes),
                   max(1, len(document.get("links", ())) // nodes), max(1, len(document.get("ports", ())) // nodes))

    def node(self, node: object) -> str:
        """The canonical id of a node named ``n4``, ``4`` or ``s0/u1/n4``."""
        if is_canonical(node):
            return str(node)
        return f"{self.prefix}/n{number(node)}"

    def chip(self, chip: object) -> str:
        """The canonical id of a chip given as its global index (or its canonical id)."""
        if is_canonical(chip) or not isinstance(chip, int):
            return str(chip)
        node, local = divmod(chip, self.chips_per_node)
        return f"{self.prefix}/n{node}/chip{local}"

    def of_entity(self, kind: str, entity: Document) -> str:
        """The canonical id of ``entity`` of ``kind`` (chip, neuronlink, efa, node) in this UltraServer."""
        ident = entity.get("id")
        if is_canonical(ident):
            return str(ident)
        index = index_of(entity)
        if index is None:
            return str(ident)
        if kind == "node":
            return f"{self.prefix}/n{index}"
        if kind == "chip":
            return self.chip(index)
        if kind == "neuronlink":
            node, local = divmod(index, self.links_per_node)
            chip, link = local % self.chips_per_node, local // self.chips_per_node
            return f"{self.prefix}/n{node}/chip{chip}/link{link}"
        if kind == "efa":
            node, local = divmod(index, self.ports_per_node)
            return f"{self.prefix}/n{node}/efa{local}"
        return str(ident)


def within(ident: str, parent: str) -> str:
    """``ident`` relative to ``parent`` (``s0/u1/n4/chip5/link0`` in ``s0/u1/n4`` -> ``chip5/link0``); the whole id
    when it is not inside ``parent``."""
    return ident[len(parent) + 1:] if ident.startswith(parent + "/") else ident


def same_entity(row: Mapping[str, Any], kind: str, index: int | None, canonical: str) -> bool:
    """Whether a row naming an entity (a culprit, an event, an advisory's cause: ``entity`` and ``id``, maybe
    ``index``) names the entity ``kind`` ``index`` whose canonical id is ``canonical``."""
    if row.get("entity") != kind:
        return False
    ident = row.get("id")
    if is_canonical(ident):
        return ident == canonical
    return index is not None and index_of(row) == index
