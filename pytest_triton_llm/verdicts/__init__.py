"""The statistics every verdict stands on: significance.py (confidence intervals, one-sided bounds, paired tests,
power, SLOs and goodput) and equality.py (how equal outputs that should be the same must be on an engine)."""
