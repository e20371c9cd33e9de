"""What a served deployment's models declare, and which test capabilities that gives it.

The inputs come from the served template family's contract (fixtures/contracts/<family>.toml, transcribed from
upstream's config.pbtxt at that tag), a repository of one's own (its config.pbtxt files) or a remote server's
metadata; compat.toml's [capability_inputs] says which inputs each capability needs. A test that needs a capability the
served models lack is skipped with the family's reason. The same table is the harness's check on itself: a test that
sends an input whose presence depends on the family must declare the capability that needs it
(`undeclared_inputs`), or on an older family it would fail instead of skipping.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from .compat import load_compat
from ..common.files import fixtures_dir
from .lock import LAYOUTS
from ..common.schema import load_toml
from ..triton.tensor_contract import RENAMED

CONTRACTS = fixtures_dir() / "contracts"
ENTRY = "entry"  # in [capability_inputs]: the entry model (ensemble or tensorrt_llm_bls) of a test's text requests
_OLD_NAME = {new: old for old, new in RENAMED.items()}

Inputs = dict[str, frozenset[str]]  # model -> its declared input names


def canonical(name: str) -> str:
    """An input by one name whatever the family calls it (min_tokens is min_length, seed is random_seed)."""
    return _OLD_NAME.get(name, name)


def _names(names) -> frozenset[str]:
    return frozenset(canonical(n) for n in names)


@lru_cache(maxsize=None)
def family_inputs(family: str, multimodal: bool = False) -> Inputs:
    """The inputs each model of a template family declares (an llmapi family: its one model, tensorrt_llm); with
    `multimodal`, its multimodal set's ensemble and encoders (fixtures/contracts/multimodal/<family>.toml) in place."""
    contract = load_toml(CONTRACTS / f"{family}.toml")
    if "inputs" in contract:  # llmapi-*: one model
        return {"tensorrt_llm": _names(contract["inputs"])}
    if multimodal:
        contract = contract | load_toml(CONTRACTS / "multimodal" / f"{family}.toml")
    return {model: _names(tables["inputs"]) for model, tables in contract.items() if "inputs" in tables}


def repository_inputs(repository: Path) -> Inputs:
    """The inputs each model of a repository of one's own declares (placeholders need not be filled for names)."""
    found = {}
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        try:
            config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
        except text_format.ParseError:  # an unfilled ${...} where a number belongs: names are all we need
            found[path.parent.name] = _names(
                line.split('"')[1] for line in path.read_text().splitlines() if line.strip().startswith("name:") and '"' in line
            )
            continue
        found[path.parent.name] = _names(i.name for i in config.input)
    return found


@lru_cache(maxsize=None)
def family_dependent(layout: str) -> Inputs:
    """Per model, the inputs that some families of `layout` declare and others do not."""
    families = [family_inputs(p.stem) for p in sorted(CONTRACTS.glob(f"{LAYOUTS[layout].families}*.toml"))]
    models = {m for f in families for m in f}
    return {
        m: frozenset().union(*(f.get(m, frozenset()) for f in families))
        - frozenset.intersection(*(f.get(m, frozenset()) for f in families))
        for m in models
    }


def _needed(capability: str) -> dict[str, tuple[str, ...]]:
    return load_compat().capability_inputs.get(capability, {})


@dataclass(frozen=True)
class ServedInputs:
    """What one deployment's models declare, and where that is known from (for skip reasons)."""

    inputs: Inputs
    source: str  # e.g. "template family trtllm-0.13 (Triton 2.50.0)"

    def lacking(self, needs: set[str], entry: str = "ensemble", options=None) -> str | None:
        """Why the served models cannot take what `needs` asks them to, or None; `options` (the lock deployment's)
        may give a capability by its own setting (compat.toml [capability_settings])."""
        settings = load_compat().capability_settings
        for capability in sorted(needs):
            if options is not None and getattr(options, settings.get(capability, ""), False) is True:
                continue
            for model, names in _needed(capability).items():
                served = entry if model == ENTRY else model
                declared = self.inputs.get(served)
                if declared is None:
                    continue  # a model the deployment does not serve: the test's entry skips it elsewhere
                missing = sorted(set(_names(names)) - declared)
                if missing:
                    return f"{self.source}: {served} declares no input {', '.join(missing)} (needed for {capability})"
        return None

    def undeclared(self, sent: dict[str, set[str]], needs: set[str], layout: str, entry: str = "ensemble") -> list[str]:
        """The family-dependent inputs a test sent (model -> names) that none of its declared capabilities covers."""
        allowed: dict[str, set[str]] = {}
        for capability in needs:
            for model, names in _needed(capability).items():
                allowed.setdefault(entry if model == ENTRY else model, set()).update(_names(names))
        varying = family_dependent(layout)
        problems = []
        for model, sent_names in sorted(sent.items()):
            kind = "tensorrt_llm_bls" if model == "tensorrt_llm_bls" else model
            for name in sorted(_names(sent_names) & varying.get(kind, frozenset()) - allowed.get(model, set())):
                problems.append(f"{name} to {model}")
        return problems
