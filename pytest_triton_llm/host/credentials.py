"""Credentials a server never needs at serve time: kept out of server environments, logs and reports."""

from __future__ import annotations

# read by huggingface_hub (gated checkpoints) and by NGC tools; a build passes them to its commands by
# name only (docker's --env=NAME), a server never gets them
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "NGC_API_KEY")


def without_secrets(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in SECRET_ENV}


def secrets_set(env: dict[str, str]) -> tuple[str, ...]:
    """The names of SECRET_ENV that `env` sets."""
    return tuple(k for k in SECRET_ENV if env.get(k))
