"""Where CodeCue keeps its files: the home folder (models, calibrations, kernel builds) and the models file."""
from __future__ import annotations

from pathlib import Path

from engine import options
from engine.options import REPO_MODELS_TOML

__all__ = ["REPO_MODELS_TOML", "codecue_home", "models_toml_path"]


def codecue_home() -> Path:
    """$CODECUE_HOME, default ~/.cache/codecue (engine/options.py)."""
    return options.current().home


def models_toml_path() -> Path:
    """$CODECUE_MODELS_TOML, default this checkout's models.toml."""
    return options.current().models_toml
