"""Which deployments a test runs on: by the fixture it asks for, the capabilities it needs, and what each
deployment's backend offers on the server in use. Plain data; plugin.py turns it into pytest params."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..stack.lock import LAYOUTS, DeploymentRef, batching_pairs, migration_pairs, speculation_pairs
from ..stack.repository import entry_models

# a deployment (or pair), what the test needs and its entry model -> why it is skipped, or None
Lacking = Callable[..., "str | None"]
# what a lock deployment is (lock.DeploymentRef.capabilities): a test that needs another is not generated for it; what
# the served stack may lack (image features, the family's inputs) makes a skip with the reason
DEPLOYMENT_CAPABILITIES = frozenset({"v1", "inflight", "streaming", "cancellation", "lora"})


@dataclass(frozen=True)
class AtEntry:
    """A deployment reached through one of its entry models (ensemble, tensorrt_llm_bls)."""

    ref: DeploymentRef
    model: str


@dataclass(frozen=True)
class Choice:
    value: DeploymentRef | AtEntry | tuple[DeploymentRef, DeploymentRef]
    id: str
    skip: str | None = None  # the reason it is skipped


def refs_of(value) -> tuple[DeploymentRef, ...]:
    """The deployments a parameter value serves."""
    if isinstance(value, AtEntry):
        return (value.ref,)
    if isinstance(value, tuple):
        return value
    return () if value is None else (value,)


def choices(
    fixture: str, selected: list[DeploymentRef], needs: set[str], lacking: Lacking, entries: bool = False
) -> tuple[list[Choice], str]:
    """(choices, why there are none) for the `triton_llm`, `triton_llm_per_engine` or a pair fixture;
    `entries`: `triton_llm` once per entry model of each deployment."""
    refs = [r for r in selected if needs & DEPLOYMENT_CAPABILITIES <= r.capabilities]
    names = ", ".join(r.id for r in selected) or "none"

    def why(ref: DeploymentRef, entry: str = "ensemble") -> str | None:
        # a test that needs a layout (what a deployment's models take) is skipped, saying why, on deployments of another
        layout = next((LAYOUTS[n].skip_without for n in sorted(needs & set(LAYOUTS)) if n not in ref.capabilities), None)
        return text_refused(ref, needs) or layout or lacking(ref, needs | {ref.options.batching}, entry)

    if fixture == "triton_llm":
        reason = f"needs a deployment with {', '.join(sorted(needs))} (selected: {names})"
        if entries:
            at_entries = [(r, model) for r in refs for model in entry_models(r)]
            return [Choice(AtEntry(r, model), f"{r.id}-{model}", why(r, model)) for r, model in at_entries], reason
        return [Choice(r, r.id, why(r)) for r in refs], reason
    if fixture == "triton_llm_per_engine":
        reason = f"needs a deployment with {', '.join(sorted(needs)) or 'anything'} (selected: {names})"
        return [
            Choice(r, r.id, text_refused(r, needs) or lacking(r, needs | {r.options.batching})) for r in one_per_engine(refs)
        ], reason
    if fixture == "triton_llm_migration":
        reason = f"needs an engine deployment and an llmapi deployment of the same checkpoint (selected: {names})"
        return [
            Choice(
                pair, pair_id(pair), lacking(pair[0], needs | {pair[0].options.batching}) or lacking(pair[1], needs | {"llmapi"})
            )
            for pair in migration_pairs(selected)
        ], reason
    if fixture == "triton_llm_speculation":
        reason = (
            "needs an llmapi deployment whose model.yaml has a speculative_config and one of the same engine without "
            f"(selected: {names})"
        )
        return [
            Choice(pair, pair_id(pair), lacking(pair[0], needs | {"llmapi"}) or lacking(pair[1], needs | {"llmapi"}))
            for pair in speculation_pairs(selected)
        ], reason
    reason = f"needs a v1 and an inflight deployment of the same engine (selected: {names})"
    pairs = batching_pairs(refs)
    return [Choice(pair, pair_id(pair), lacking(pair[0], needs | {"v1", "inflight"})) for pair in pairs], reason


def text_refused(ref: DeploymentRef, needs: set[str]) -> str | None:
    """Why a test that does not ask for its layout skips a deployment that answers no text-only request (multimodal)."""
    layout = ref.serving_layout
    return None if layout.text_refused is None or layout.name in needs else layout.text_refused


def has_dummy_weights(ref: DeploymentRef) -> bool:
    """Its engine's weights are random (lock source `dummy`); a remote server's engine (runtimes/remote) is not known to be."""
    return getattr(ref.engine, "dummy_weights", False)


def untrained(refs: Iterable[DeploymentRef], why: str) -> str | None:
    """Why a test that needs trained weights (`why`) skips these deployments: the first whose engine has dummy weights."""
    ref = next((r for r in refs if has_dummy_weights(r)), None)
    return None if ref is None else f"{ref.engine_name} has dummy weights (lock source 'dummy'): {why}"


def marked_gpu_by_code(item) -> bool:
    """`@pytest.mark.gpu` on the test, its class or module (a GPU engine's parameters carry the marker for -m
    selection only: their builds say themselves what they lack)."""
    owners = (getattr(item, "obj", None), getattr(item, "cls", None), getattr(item, "module", None))
    marks = [getattr(owner, "pytestmark", []) for owner in owners]
    return any(m.name == "gpu" for mark in marks for m in (mark if isinstance(mark, list) else [mark]))


def one_per_engine(refs: list[DeploymentRef]) -> list[DeploymentRef]:
    """The in-flight deployment of each engine when selected (requests run concurrently), else its first."""
    chosen: dict[str, DeploymentRef] = {}
    for ref in refs:
        current = chosen.get(ref.engine_name)
        if current is None or (ref.options.batching == "inflight" and current.options.batching != "inflight"):
            chosen[ref.engine_name] = ref
    return list(chosen.values())


def pair_id(pair: tuple[DeploymentRef, DeploymentRef]) -> str:
    first, second = pair
    if first.engine_name == second.engine_name:
        return f"{first.engine_name}:{first.name}-vs-{second.name}"
    return f"{first.id}-vs-{second.id}"


def schedule_groups(selected: list[DeploymentRef]) -> dict[str, str]:
    """Parameter id -> the deployments it serves, for scheduling tests over xdist workers."""
    groups = {r.id: r.id for r in selected}
    pairs = batching_pairs(selected) + migration_pairs(selected) + speculation_pairs(selected)
    groups.update({pair_id(pair): f"{pair[0].id}+{pair[1].id}" for pair in pairs})
    return groups
