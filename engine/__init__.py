"""CodeCue's inference engine: models, drafters and the lossless speculative decode loop. Knows tokens, never LSP."""
from engine.store.config import ModelsError
from engine.types import CancelToken, CompletionRequest, CompletionResult, CompletionStats

__all__ = ["CancelToken", "CompletionRequest", "CompletionResult", "CompletionStats", "Engine", "LoadedPair",
           "ModelsError", "load_pair"]


def __getattr__(name):  # Engine and loading pull in torch: `import engine` stays light for the command-line tools
    if name == "Engine":
        from engine.engine import Engine
        return Engine
    if name in ("LoadedPair", "load_pair"):
        from engine.loading import pair
        return getattr(pair, name)
    raise AttributeError(name)
