"""What `pytest-triton-llm serve-llama-cpp` says when its server ends by itself: the exit status or the signal, and
for SIGILL what to rebuild (a native llama.cpp build on a VM that reports AMX it cannot run was killed so)."""

import signal

from pytest_triton_llm.cli.serve import _ended


def test_a_server_killed_by_sigill_says_to_rebuild_llama_cpp_portable():
    assert _ended(-signal.SIGILL) == (
        "was killed by SIGILL, an instruction this CPU refuses: reinstall the llama-cpp extra built with "
        "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF' (docs/troubleshooting.md)"
    )


def test_another_signal_or_an_exit_status_is_named():
    assert (_ended(-signal.SIGKILL), _ended(1)) == ("was killed by SIGKILL", "exited on its own (exit 1)")
