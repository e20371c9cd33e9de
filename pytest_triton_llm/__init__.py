"""pytest-triton-llm: conformance and e2e suites for LLMs served by Triton + TensorRT-LLM."""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib import metadata

try:
    __version__ = metadata.version("pytest-triton-llm")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

# Public modules that moved, importable by their old names for one release (CHANGELOG, 0.1.0), with a warning. A finder,
# not a module file at the package's root: the root holds only this file and the concept folders.
MOVED = {f"{__name__}.client": f"{__name__}.triton.client"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        warnings.warn(
            f"{spec.name} moved to {MOVED[spec.name]}; the old name goes in the next release", DeprecationWarning, stacklevel=2
        )
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass  # the new module, already executed


sys.meta_path.append(_MovedModules())
