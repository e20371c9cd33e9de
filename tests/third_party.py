"""Third-party test data beside the checkout (../shared/upstream: upstream's v0.14.0 model repository, unmodified).

CI lays it beside the clone; a fresh clone of a user's has none, and the tests that read it skip, saying so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = ROOT.parent / "shared" / "upstream" / "tensorrtllm_backend-v0.14.0"
UPSTREAM_MODELS = UPSTREAM / "all_models" / "inflight_batcher_llm"
THIRD_PARTY_ABSENT = "third-party test data"  # how its skips begin
needs_upstream = pytest.mark.skipif(
    not UPSTREAM_MODELS.is_dir(), reason=f"{THIRD_PARTY_ABSENT} {UPSTREAM} is absent (CI lays ../shared beside the clone)"
)
