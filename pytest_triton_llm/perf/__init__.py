"""Performance: workloads, an asyncio load generator, LLM metrics, budgets, baselines and plots."""
