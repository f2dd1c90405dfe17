"""CodeCue's inference engine: models, drafters and the lossless speculative decode loop. Knows tokens, never LSP."""
from .models import LoadedPair, ModelsError, load_pair
from .types import CancelToken, CompletionRequest, CompletionResult, CompletionStats

__all__ = ["CancelToken", "CompletionRequest", "CompletionResult", "CompletionStats", "Engine", "LoadedPair",
           "ModelsError", "load_pair"]


def __getattr__(name):  # Engine pulls in torch; keep `import engine` light for the CLI tools
    if name == "Engine":
        from .engine import Engine
        return Engine
    raise AttributeError(name)
