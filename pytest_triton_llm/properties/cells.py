"""One cell of the property matrix run: a property on a path in a mode, judged by its effect check, or by the refused
or ignored check where the path's contract says the family refuses or ignores the field; Unanswerable (a skip with
the contract's reason) where the path has no input for it."""

from __future__ import annotations

from functools import cache

from ..common.schema import load_toml
from .effects import EFFECTS, Context, ignored, refused
from .matrix import OPENAI, PROPERTIES_FILE, Property
from .requests import Unanswerable


@cache
def probes() -> dict:
    """fixtures/properties.toml's [openai_probes], read once per process (each refused or ignored cell asks for it)."""
    return load_toml(PROPERTIES_FILE).get("openai_probes", {})


def run_cell(prop: Property, ctx: Context) -> None:
    path = ctx.path
    names = list(prop.names.get(path.surface, ()))
    if not names:
        raise Unanswerable(f"{path.name}: its contract has no input for {prop.name} (fixtures/properties.toml)")
    if path.surface == OPENAI and (contract := _contract_check(prop, ctx, names)):
        contract()
        return
    if not prop.effect:
        raise Unanswerable(f"{prop.name} on {path.name}: {prop.how}")
    if why := path.lacks(names):
        raise Unanswerable(why)
    EFFECTS[prop.effect](ctx)


def _contract_check(prop: Property, ctx: Context, names: list[str]):
    """The refused or ignored check of the first of `names` the family refuses or ignores (top-level fields only)."""
    for name in names:
        support = ctx.path.support(name)
        if support in ("refused", "ignored") and "." not in name:
            value = probes().get(name)
            if value is None:
                raise AssertionError(f"fixtures/properties.toml [openai_probes] has no value for {name}: add one")
            check = refused if support == "refused" else ignored
            return lambda: check(ctx, name, value)
    return None
