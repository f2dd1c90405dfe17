"""A language server started for a benchmark or a test, always ended: shut down politely after a run that went
well, killed after one that failed (pytest-lsp's stop() waits for the server to exit, and a server never told to
exit would keep it waiting)."""
from __future__ import annotations

from contextlib import asynccontextmanager


@asynccontextmanager
async def running(config):
    """The started client of a pytest_lsp.ClientServerConfig; the caller initializes the session."""
    client = await config.start()
    try:
        yield client
        await client.shutdown_session()
    except BaseException:
        if client._server is not None and client._server.returncode is None:
            client._server.kill()
        raise
    finally:
        await client.stop()
