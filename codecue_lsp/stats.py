"""`codecue.stats`: the server's counters (telemetry.py), the size of everything long-lived, and the backend's state."""
from __future__ import annotations

from .backend import BackendStats, describe_unloaded


def server_stats(ls) -> dict:
    out = ls.telemetry.snapshot()
    out["ready"] = ls.ready
    out["load_error"] = ls.load_error
    out["min_confidence"] = ls.min_confidence()
    out["pair"] = ls.settings.pair
    backend = ls.completer
    if backend is None:  # loading, or the load failed
        state, budget, cold, described = BackendStats(), None, None, describe_unloaded(ls.settings, ls.load_error)
    else:
        state, described = backend.stats(), backend.describe()
        budget, cold = backend.prompt_tokens(ls.settings), backend.cold_prompt_tokens(ls.settings)
    out["workspace_documents"] = state.workspace_documents
    out["resources"] = resource_sizes(ls, state)
    out["prompt_tokens"] = budget  # the prompt budget in use
    out["cold_prompt_tokens"] = cold  # a cold start's smaller one (growth.py); None where prompts never start small
    out["backend"] = described
    out["context"] = ls.project.stats()  # the workspace index: files, definitions, memory, last update
    out["last_prompt"] = ls.last_prompt
    return out


def resource_sizes(ls, backend: BackendStats) -> dict:
    """How many entries each long-lived structure holds, so a soak run can see that none of them grows."""
    return {
        "open_documents": len(ls.workspace.text_documents),
        "in_flight": len(ls.scheduler._in_flight),
        "background": int(ls.scheduler.background is not None),  # a next line, growth or warm-up
        "request_futures": len(ls.protocol._request_futures),
        "typethrough_entries": len(ls.typethrough),
        "syntax_documents": len(ls.syntax._entries) if ls.syntax is not None else 0,
        "latency_samples": len(ls.telemetry.latencies_ms),
        "engine_sessions": backend.sessions,
        "engine_busy": backend.busy,
        "engine_phase": backend.phase,
        "index_documents": backend.index_documents,
    }
