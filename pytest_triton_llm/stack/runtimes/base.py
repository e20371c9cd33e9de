"""What a runtime is (where tritonserver runs), as the deployment manager needs it. One module per
runtime, named in the registry (stack/runtimes/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..compat import ImageEntry
from ...host.endpoints import Endpoints
from ..engines.base import BuildSite
from ...host.hardware import describe_hardware, hardware
from ...host.images import ImageRef
from ...common.progress import Progress
from .server import TritonServer
from ...common.errors import TritonLLMError

if TYPE_CHECKING:
    from ..cache import BuiltEngine
    from ..capabilities import ServedInputs
    from ..lock import DeploymentRef, Lock


class RuntimeUnavailable(TritonLLMError, RuntimeError):
    """The chosen runtime cannot run here (a missing SDK or server): one line, exit 4 once a test needs it.
    Options that contradict each other raise usage.OptionError at once."""


@dataclass(frozen=True)
class RemoteOptions:
    """--triton-url and what goes with it: the options of a runtime that attaches to a running server (here, not in
    stack/runtimes/remote.py, so that ServerOptions needs no runtime's module)."""

    url: str  # as shown: grpc[s]://host:port, never with credentials
    endpoints: Endpoints
    tokenizer: str | None = None  # --tokenizer: a directory or a Hugging Face id, where tokenizer_dir is not readable
    allow_load: bool = False  # --triton-allow-load: tests that stress the server run too


@dataclass(frozen=True)
class ServerOptions:
    """The server-side options (--triton-*), as every runtime reads them."""

    image: ImageRef | None = None  # --triton-image
    runtime: str | None = None  # --triton-runtime
    binary: str | None = None  # --triton-binary
    gpus: str | None = None  # --triton-gpus
    trtllm_examples: str | None = None  # --trtllm-examples
    trtllm_stand_in: bool = False  # --trtllm-stand-in
    trtllm_models: str | None = None  # --trtllm-models: upstream's python models at the image's tag, where no GitHub
    stand_in_fault: str | None = None  # --stand-in-fault: a known upstream bug the stand-ins reproduce (faults.py)
    remote: RemoteOptions | None = None  # --triton-url and its companions
    keep_warm_s: float = 0.0  # --triton-keep-warm: local servers outlive the session by this much (stack/runtimes/warm.py)


@dataclass(frozen=True)
class Launch:
    """One deployment's server, as the deployment manager asks a runtime for it."""

    deployment_id: str
    repository: Path
    engine_dir: Path
    engine_name: str
    log_path: Path
    timeout_s: float
    world_size: int = 1
    gpu: bool = False  # the engine runs on a GPU (its backend's needs_gpu); --triton-gpus overrides
    # it reproduces a stand-in fault rendered into its repository: never kept warm (no other session serves that
    # repository, and the state a fault leaves in a server must not reach a clean run)
    faulted: bool = False
    own: bool = False  # a server its test breaks (kills its engine): never taken from or kept among the warm servers
    fault_switch: str | None = None  # a stand-in fault switched on in a clean warm server while it serves (warm.py)


class Runtime(Protocol):
    """What a runtime is to its callers. Nothing outside its module asks for a runtime by name: what differs between
    runtimes is a member here (tests/unit/test_architecture.py keeps it so). RuntimeBase gives the usual defaults."""

    name: ClassVar[str]  # its name in the registry (stack/runtimes/__init__.py)
    markers: ClassVar[dict[str, str]]  # pytest marker -> description: every test of its deployments carries them
    # it attaches to a server that runs already: the deployments are that server's, nothing is built, rendered or
    # started here (so --trtllm-stand-in swaps nothing in), and the lock is optional
    attaches: ClassVar[bool]
    # its servers can outlive their session for a later one (--triton-keep-warm, stack/runtimes/warm.py)
    keeps_warm: ClassVar[bool]

    @classmethod
    def default_for(cls, options: ServerOptions) -> bool:
        """Whether `options` choose this runtime where --triton-runtime names none (one runtime does, whatever they are)."""

    @classmethod
    def refuses_load(cls, options: ServerOptions) -> str | None:
        """Why tests that stress the server (marker triton_llm_load) do not run on its servers, or None."""

    # read by callers, never set: an attribute or a property of the runtime
    @property
    def reference(self) -> str:
        """What serves, for reports: "local" or the image reference."""

    @property
    def entry(self) -> ImageEntry | None:
        """compat.toml's image this server is, when known."""

    @property
    def gpu(self) -> str | None:
        """The nvidia-smi index of the GPU its servers compute on: None the first, "none" no GPU."""

    @property
    def hardware(self) -> str:
        """What its servers compute on, for reports and budgets (hardware.hardware), as far as it is known from here."""

    @classmethod
    def create(cls, options: ServerOptions, cache_root: Path, progress: Progress) -> Runtime:
        """The runtime, once what it needs is found here; RuntimeUnavailable (one line) otherwise, or
        OptionError for options it cannot take."""

    @property
    def triton_version(self) -> str:
        """The server's version: it picks the model templates."""

    def known_version(self) -> str | None:
        """The server's version where it is known without pulling an image (collection asks it: what the served
        models declare picks which tests run), else None."""

    def describe(self) -> str: ...

    def header_lines(self) -> list[str]:
        """pytest's report header: where and what serves."""

    def report_block(self) -> dict | None:
        """The report's `server` block, or None."""

    def build_site(self) -> BuildSite:
        """Where an engine build's commands run for this runtime."""

    def engine_dir_in_server(self, engine_name: str) -> str | None:
        """Where the server sees an engine (None: where the cache keeps it)."""

    def python_models_in_image(self) -> str | None:
        """Where the serving image ships upstream's inflight_batcher_llm python models (compat.toml [python_models],
        looked for in the image), or None: a tensorrtllm deployment then gets the pinned files."""

    def start(self, launch: Launch) -> TritonServer:
        """A ready server for `launch`; ServerStartError (with the log's errors) otherwise."""

    def switches_faults(self) -> bool:
        """Whether its servers take a stand-in fault as a switch on a clean warm server (Launch.fault_switch) instead of
        a repository rendered with it."""

    def deployments(self, lock: Lock | None, names: list[str]) -> list[DeploymentRef] | None:
        """The deployments this runtime serves by itself (a remote server's), or None: the lock's, built and started."""

    def served_inputs(self, ref: DeploymentRef) -> ServedInputs | None:
        """What a deployment it serves by itself declares (a remote server's models), or None: the session reads the
        repository or the template family instead."""

    def attach(self, ref: DeploymentRef) -> tuple[BuiltEngine, TritonServer] | None:
        """For a deployment served by itself: its engine as far as it is known here and its running server; None:
        build, render and start."""

    def hardware_description(self) -> str:
        """The report header's hardware line."""

    def gpu_missing(self) -> str | None:
        """Why a test marked `gpu` cannot run on its servers, or None."""


def no_gpu_here(gpu: str | None) -> str | None:
    """Why a test marked `gpu` cannot run on servers of this host that compute on `gpu` (Runtime.gpu), or None."""
    if gpu == "none":
        return "needs an NVIDIA GPU: --triton-gpus none hides them"
    return "needs an NVIDIA GPU: nvidia-smi lists none on this host" if hardware(gpu) == "cpu" else None


class RuntimeBase:
    """The defaults of a Runtime: its servers start on this host from the lock's deployments, built and rendered here,
    and read engines where the cache keeps them. A runtime overrides what differs."""

    markers: ClassVar[dict[str, str]] = {}
    attaches: ClassVar[bool] = False
    keeps_warm: ClassVar[bool] = False

    @classmethod
    def default_for(cls, options: ServerOptions) -> bool:
        return False  # chosen by --triton-runtime only

    @classmethod
    def refuses_load(cls, options: ServerOptions) -> str | None:
        return None  # its servers are this session's own

    @property
    def gpu(self) -> str | None:
        raise NotImplementedError  # every runtime says which GPU its servers compute on

    @property
    def hardware(self) -> str:
        return hardware(self.gpu)  # its servers run on this host

    def report_block(self) -> dict | None:
        return None

    def engine_dir_in_server(self, engine_name: str) -> str | None:
        return None  # the server reads the engine where the cache keeps it

    def python_models_in_image(self) -> str | None:
        return None

    def deployments(self, lock: Lock | None, names: list[str]) -> list[DeploymentRef] | None:
        return None  # the lock's, built and started here

    def served_inputs(self, ref: DeploymentRef) -> ServedInputs | None:
        return None  # it serves no deployment by itself: the session reads the repository or the template family

    def attach(self, ref: DeploymentRef) -> tuple[BuiltEngine, TritonServer] | None:
        return None

    def switches_faults(self) -> bool:
        return False  # a fault is rendered into the repository its own server serves

    def hardware_description(self) -> str:
        return describe_hardware(self.gpu)

    def gpu_missing(self) -> str | None:
        return no_gpu_here(self.gpu)
