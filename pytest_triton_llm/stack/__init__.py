"""The served stack: the lock (engines and their deployments), the compat matrix, the engine cache and what a
deployment can do (capabilities.py); engines/ builds engines, repository/ renders model repositories, runtimes/ starts
tritonserver; deployments.py runs them in that order for a session."""
