"""The pytest plugin: options, markers, hooks and fixtures (hooks.py, the pytest11 entry point), the session that
serves what the run selected (session.py, selection.py, distributed.py for xdist), and what the run prints and keeps
(terminal.py, report.py). Verdicts are library code in the concept folders, never here."""
