"""Known upstream bugs that the project's stand-ins reproduce on demand: the catalog (catalog.py,
fixtures/faults.toml) and the campaign that shows which tests catch each (campaign/, `pytest-triton-llm faults`)."""

from .catalog import CATALOG, MODELS, NOT_CLEAN, Fault, fault_named, injected, load_catalog

__all__ = ["CATALOG", "MODELS", "NOT_CLEAN", "Fault", "fault_named", "injected", "load_catalog"]
