"""`pytest-triton-llm faults`: run each fault of the catalog on its deployment beside clean runs, and say what caught it.

Each run is its own `python -m pytest` of the suites (own basetemp, own --triton-llm-report). The clean runs of a
deployment start first: together they select everything its faults' runs select, without a fault, and must pass; the
tests that time nothing run beside other runs, those that do (perf, batching) alone. A fault run selects its row's
markers (`-m`), `keyword` (`-k`) and `pytest_args` on its row's deployment with `--stand-in-fault NAME`, and is judged
once its clean runs have ended: the fault is caught when a test failed or errored that a clean run ran without a
failure (so that what the harness or the host broke in both runs never passes for a catch). The runs share warm
servers (stack/runtimes/warm.py): a fault run switches its fault on in a clean one while it holds it, unless its row gives it
a server of its own (own_server).

Baselines: a row whose pytest_args hold `{accuracy_baseline}` compares with a baseline that the clean run of its
deployment saves (--accuracy-save into OUT/baselines/). A clean run passes its rows' arguments (a workload, a dataset)
so that both runs measure the same thing, leaving out the options that read a baseline; two rows of one deployment that
give an option different values are refused, except a repeatable one (--perf-compare-fail), whose values add up. The
perf rows judge against a clean reference measured in the same rounds (--perf-against), not a saved baseline: on a
shared machine a clean rerun measured 23.7% below a baseline saved minutes before (2026-11-26); their clean run is
the A/A check, the deployment against its own clean twin, which must pass every rule of its rows.
"""

from .command import add_arguments, campaign, out_dir

__all__ = ["add_arguments", "campaign", "out_dir"]
