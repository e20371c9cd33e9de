"""The perf history: every perf run appended to one SQLite file (store), its series' change points found by Apache
Otava (otava), judged (judge) and drawn (plot). `pytest-triton-llm perf-history` is its command; `--perf-history FILE`
appends a pytest session's load points."""
