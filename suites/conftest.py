"""Shared data for the suites: prompts, the upstream tensor contract, adapters, datasets and perf workloads."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_triton_llm.accuracy.dataset import DatasetError, load_cnn_dailymail
from pytest_triton_llm.accuracy.drift import OutputsWriter
from pytest_triton_llm.accuracy.prompting import build_prompt, user_message
from pytest_triton_llm.accuracy.rouge import METRICS, per_article_scores, rouge_scores
from pytest_triton_llm.accuracy.verdicts import THRESHOLD_HEADER, InconclusiveAccuracy, judge_thresholds
from pytest_triton_llm.equality import rule_for
from pytest_triton_llm.lora import build_adapter
from pytest_triton_llm.lora.recipes import load_recipes
from pytest_triton_llm.perf.budgets import find_budget
from pytest_triton_llm.perf.client_processes import BUSY_LOOP
from pytest_triton_llm.perf.mlperf import judge as judge_mlperf
from pytest_triton_llm.perf.repeats import PerfNoisy, judge_goodput, median_run, spread
from pytest_triton_llm.plugin import deselect, perf_settings
from pytest_triton_llm.repository import template_family
from pytest_triton_llm.schema import load_toml
from pytest_triton_llm.terminal import table

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass(frozen=True)
class Prompts:
    """fixtures/prompts.toml: completion prompts by name, and the chat question with its expected answer."""

    completion: dict[str, str]
    chat_question: str
    chat_expected: str

    def batch(self, count: int | None = None) -> list[str]:
        """The first `count` completion prompts (all by default), in the file's order."""
        return list(self.completion.values())[:count]


@pytest.fixture(scope="session")
def prompts() -> Prompts:
    data = load_toml(FIXTURES / "prompts.toml")
    return Prompts(data["completion"], data["chat"]["question"], data["chat"]["expected_substring"])


@pytest.fixture(scope="session")
def contract(triton_llm) -> dict:
    """The inflight_batcher_llm contract of the served Triton version's template family."""
    return load_toml(FIXTURES / "contracts" / f"{template_family(triton_llm.server.version)}.toml")


def equality_rule_of(served):
    """How equal outputs that should be the same must be on a served deployment's engine (its lock's [equality], else
    by dtype and device: pytest_triton_llm.equality.rule_for)."""
    return rule_for(served.ref.engine, served.hardware)


V1_CONCURRENCY = 4  # a server that runs one request at a time (llama-cpp-python) queues the rest
V1_ENDPOINT = {"chat": "/chat/completions", "plain": "/completions"}  # by the [accuracy] table's prompt


def v1_summaries(openai_target, articles, settings, tokenizer, max_input_len: int) -> list[str]:
    """Greedy summaries over /v1 as an engine's [accuracy] table says, V1_CONCURRENCY at a time: each article the user
    message of /v1/chat/completions (the server renders its own chat template, as users' clients call it) or, for a
    "plain" prompt, the rendered text on /v1/completions; cut to fit by `tokenizer` as on Triton."""

    def summary(article) -> str:
        if settings.prompt == "chat":
            message = user_message(article, settings, tokenizer, max_input_len)
            return openai_target.endpoint.chat(openai_target.chat(message, settings.max_new_tokens)).text
        prompt = build_prompt(article, settings, tokenizer, max_input_len)
        return openai_target.endpoint.complete(openai_target.completion(prompt, settings.max_new_tokens)).text

    with ThreadPoolExecutor(V1_CONCURRENCY) as pool:
        return list(pool.map(summary, articles))


def rouge_meets_the_thresholds(outputs: list[str], cnn, settings, options, record, where: str) -> None:
    """The threshold verdict of the accuracy suites (Triton and /v1): the summaries' ROUGE against the lock's
    min_rouge* by one-sided bounds at the rule's alpha, recorded by `record` (means, 95% CIs, verdicts) before
    the verdict: a fail fails, an inconclusive one warns (fails under --accuracy-strict). `where` names the run."""
    assert all(outputs), "some articles got an empty summary"
    references = [a.reference for a in cnn.articles]
    scores = rouge_scores(outputs, references)
    rule = options.rule(settings)
    verdicts = judge_thresholds(per_article_scores(outputs, references), settings, rule.alpha)
    accuracy = {m: scores[m]["mid"] for m in METRICS}
    accuracy.update({f"{m}_ci95": [scores[m]["low"], scores[m]["high"]] for m in METRICS})
    accuracy.update(
        n_articles=len(outputs),
        max_new_tokens=settings.max_new_tokens,
        dataset=cnn.source,
        alpha=rule.alpha,
        verdicts=[v.as_dict() for v in verdicts],
    )
    record(accuracy)
    report = "\n".join(table(THRESHOLD_HEADER, [v.row() for v in verdicts]))
    where = f"{where}, {len(outputs)} articles from {cnn.source}, one-sided bounds at alpha {rule.alpha:g}"
    if any(v.result.verdict == "fail" for v in verdicts):
        pytest.fail(f"ROUGE significantly below the rule ({where}):\n{report}", pytrace=False)
    if any(v.result.verdict == "inconclusive" for v in verdicts):
        message = f"these articles cannot tell ROUGE from its rule ({where}):\n{report}"
        if rule.strict:
            pytest.fail(f"{message}\n--accuracy-strict: inconclusive fails", pytrace=False)
        warnings.warn(InconclusiveAccuracy(message), stacklevel=2)


def underpowered_drop_gate(results: dict, rule, articles: int, where: str, paired: str) -> None:
    """The paired ROUGE-drop gates (the drift against a baseline, the migration to /v1): where the articles can only
    catch a drop of more than twice the allowed one, a real regression may pass; a warning says so, and under
    --accuracy-strict the gate fails."""
    if not any(r.underpowered for r in results.values()):
        return
    detectable = max(r.detectable_drop for r in results.values())
    message = (
        f"{articles} articles can only catch a drop of {detectable:.2f} ROUGE points, more than twice the "
        f"{rule.max_drop:g} allowed ({where}): a real regression may pass; more articles (--accuracy-samples, or a "
        f"larger dataset) make the gate decisive\n{paired}"
    )
    if rule.strict:
        pytest.fail(f"{message}\n--accuracy-strict: an underpowered gate fails", pytrace=False)
    warnings.warn(InconclusiveAccuracy(message), stacklevel=2)


@pytest.fixture(scope="session")
def equality_rule(triton_llm):
    return equality_rule_of(triton_llm)


@pytest.fixture(scope="session")
def pair_equality_rule(triton_llm_pair):
    """The rule of the pair's engine (both deployments serve one engine)."""
    return equality_rule_of(triton_llm_pair[0])


@pytest.fixture(scope="session")
def migration_equality_rule(triton_llm_migration):
    """The rule of the llmapi side's engine: how equal its answers must be to the engine deployment's."""
    return equality_rule_of(triton_llm_migration[1])


@pytest.fixture(scope="session")
def lora_adapters(triton_llm, triton_llm_engine_cache) -> dict:
    """fixtures/lora_adapters.toml's adapters for the deployment's engine, built once and cached."""
    recipes = {n: r for n, r in load_recipes(FIXTURES / "lora_adapters.toml").items() if r.engine == triton_llm.ref.engine_name}
    if not recipes:
        pytest.fail(f"fixtures/lora_adapters.toml has no adapter for engine {triton_llm.ref.engine_name}", pytrace=False)
    return {name: build_adapter(triton_llm_engine_cache, name, recipe, triton_llm.engine) for name, recipe in recipes.items()}


@pytest.fixture(scope="session")
def cnn(triton_llm_accuracy_options, triton_llm_progress):
    """CNN/DailyMail articles: --accuracy-dataset PATH, else the Hub's cnn_dailymail 3.0.0 (100 by default)."""
    options = triton_llm_accuracy_options
    try:
        with triton_llm_progress.step(f"accuracy: loading CNN/DailyMail from {options.dataset or 'the Hugging Face Hub'}"):
            return load_cnn_dailymail(options.dataset, options.split, options.articles)
    except DatasetError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def accuracy_outputs(triton_llm_accuracy_options):
    """Where --accuracy-save writes each deployment's outputs (None without the option)."""
    path = triton_llm_accuracy_options.save
    return OutputsWriter(path) if path else None


def pytest_generate_tests(metafunc):
    if "load_point" in metafunc.fixturenames:  # the perf suite: one test per load point of the workload
        _, workload = perf_settings(metafunc.config).workload_from(FIXTURES / "perf_workloads.toml")
        points = workload.load_points()
        metafunc.parametrize("load_point", points, ids=[name for name, _ in points])


def pytest_collection_modifyitems(config, items):
    """The perf suite's saturation sweep runs only when asked for (--perf-sweep): deselected, not skipped, without."""
    if perf_settings(config).sweep:
        return
    deselect(config, items, [item for item in items if getattr(item, "originalname", None) == "test_saturation_sweep"])


@pytest.fixture(scope="session")
def perf_workload(triton_llm_perf_options):
    """(name, workload): --perf-workload of --perf-workloads's file, else of fixtures/perf_workloads.toml."""
    return triton_llm_perf_options.workload_from(FIXTURES / "perf_workloads.toml")


def load_point_result(runs: list[dict], records: list, seconds: float, options) -> dict:
    """A load point's report entry: the run with the median throughput stands for it, every run's figures beside it
    (--perf-repeats), goodput (--perf-slo) and MLPerf's VALID or INVALID (--perf-mlperf) over every run's requests."""
    result = dict(median_run(runs))
    if len(runs) > 1:
        result.update(runs=runs, repeats=spread(runs), errors=sum(r["errors"] for r in runs))
    if options.slos:
        result["goodput"] = judge_goodput(records, options.slos, seconds)
    if options.mlperf:
        result["mlperf"] = judge_mlperf(*options.mlperf, records)
    return result


def judge_budget(
    budgets_file: Path, budgets: list, identity: dict, result: dict, runs: list[dict], options, who: str
) -> list[str]:
    """The load point `result` (of `runs`) against the budget that matches `identity` (engine, deployment, hardware,
    hardware_class, image, load_point, workload): records on `result` whether and by what it was judged; -> what
    fails it. An inconclusive verdict warns (naming `who`), and fails under --perf-strict; a load point that no budget
    matches fails under --perf-require-budget."""
    budget = find_budget(budgets, **identity)
    problems: list[str] = []
    result["judged"], result["budget_match"] = budget is not None, None
    if budget is None:
        result["budget"] = f"none for hardware {identity['hardware']}, image {identity['image']}: measured, not judged"
        if options.require_budget:
            problems.append(
                f"no budget in {budgets_file} matches it (engine {identity['engine']}, deployment "
                f"{identity['deployment']}, hardware {identity['hardware']}, image {identity['image']}, workload "
                f"{identity['workload']}) and --perf-require-budget asks for one: derive them from a quiet "
                "--perf-repeats 3 run's report with scripts/derive_budgets.py, or judge against a saved "
                "run with --perf-compare"
            )
        return problems
    result["budget_match"] = budget.match(next(i for i, b in enumerate(budgets, 1) if b is budget))
    rows = budget.check(result, runs)
    result["budget"] = {r[0]: r[3] for r in rows}
    shown = "\n".join(table(["limit", "measured", "budget", ""], rows))
    if any(r[3] == "inconclusive" for r in rows):  # the interval straddles a limit: not evidence of a miss
        unsure = f"{len(runs)} runs cannot tell a limit from its budget:\n{shown}"
        if options.strict:  # --perf-strict: every verdict is pass or fail
            problems.append(f"inconclusive under --perf-strict ({unsure})")
        else:
            warnings.warn(PerfNoisy(f"{who}: {unsure}"), stacklevel=2)
    if any(r[3] == "MISSED" for r in rows):
        problems.append(f"missed its budget:\n{shown}")
    return problems


def client_problems(runs: list[dict], workers: int, options, who: str) -> list[str]:
    """Where the load generator's event loops were busy over BUSY_LOOP in some run, latency is partly the client's:
    a warning naming `who`, or under --perf-strict what fails the load point."""
    behind = [r["client"]["loop_busy"] for r in runs if not r["client"]["kept_up"]]
    if not behind:
        return []
    slow = (
        f"the load generator's event loops were busy {max(behind):.0%} of the run (over {BUSY_LOOP:.0%}: responses "
        f"waited for the client, so latency is partly the client's); raise --perf-workers (now {workers})"
    )
    if options.strict:
        return [slow]
    warnings.warn(PerfNoisy(f"{who}: {slow}"), stacklevel=2)
    return []


@pytest.fixture(scope="session")
def perf_budgets(triton_llm_perf_options):
    """(file, budgets): --perf-budgets's file, which replaces fixtures/perf_budgets.toml, else that one."""
    return triton_llm_perf_options.budgets_from(FIXTURES / "perf_budgets.toml")
