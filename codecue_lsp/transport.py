"""Reading LSP frames from a byte stream that may hold garbage, and serving one connection with them.

pygls' reader (pygls/io_.py) trusts the client: a `Content-Length` of 10**13 makes it allocate that much and die
with MemoryError, a header in lower case or one that follows the tail of a truncated body on the same line is not
seen (so the next request is lost and its client waits forever), and a line without a newline is read whole into
memory. This reader keeps these rules instead:

- A header block is a run of lines ending in an empty line (`\\r\\n` or `\\n`). A line that *ends* in
  `Content-Length: N` (name in any case, up to 16 spaces or tabs around N, `\\r\\n` or `\\n`) sets the length
  of the next body; the last one in a block wins. Any other line (Content-Type, garbage, the tail of a truncated
  body) is ignored. A valid JSON body cannot contain a raw newline inside a string, so this never finds a header
  inside a well-formed message.
- At the empty line, exactly N bytes are read as the body, whatever they hold. A length that overshoots therefore
  swallows the start of what follows; the reader resynchronises at the next line that ends in a header.
- An empty line with no length before it is ignored.
- A length above MAX_BODY_BYTES is refused: it is forgotten as if the line were garbage, so its body is skipped line
  by line, in pieces of at most MAX_LINE_BYTES. Memory stays bounded whatever the client declares.
- End of input, also in the middle of a body, ends the connection.
"""
from __future__ import annotations

import asyncio
import logging
import re
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Callable

from pygls.io_ import StdoutWriter

logger = logging.getLogger(__name__)

# A 10 MB document is legitimate (didOpen of a large file); a body several times that is not an editor's message.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024
_CONTENT_LENGTH = re.compile(rb"content-length:[ \t]{0,16}(\d{1,15})[ \t]{0,16}\r?\n\Z", re.IGNORECASE)
_HEADER_TAIL = 128  # longer than the longest line _CONTENT_LENGTH matches


class FrameReader:
    """Blocking: `next_body()` returns the next body (bytes) or None at end of input."""

    def __init__(self, readline: Callable[[int], bytes], read: Callable[[int], bytes]) -> None:
        self._readline = readline
        self._read = read

    def next_body(self) -> bytes | None:
        length: int | None = None
        pending = b""  # the end of a line longer than MAX_LINE_BYTES, kept to spot a header at its end
        while True:
            piece = self._readline(MAX_LINE_BYTES)
            if not piece:
                return None
            if not piece.endswith(b"\n"):
                pending = (pending + piece)[-_HEADER_TAIL:]
                continue
            line, pending = (pending + piece)[-_HEADER_TAIL:], b""
            if match := _CONTENT_LENGTH.search(line):
                length = int(match.group(1))
                if length > MAX_BODY_BYTES:
                    logger.warning("refused a frame of %d bytes (limit %d); skipping to the next header",
                                   length, MAX_BODY_BYTES)
                    length = None
            elif line.strip() == b"" and length is not None:
                body = self._read(length)
                if len(body) < length:
                    return None
                return body


async def _read_loop(server, stdin: BinaryIO) -> None:
    reader = FrameReader(stdin.readline, stdin.read)
    # Its own thread: a blocking read must not take a worker from pygls' pool (used by @server.thread handlers).
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-stdin")
    loop = asyncio.get_running_loop()
    try:
        while not server._stop_event.is_set():
            body = await loop.run_in_executor(executor, reader.next_body)
            if body is None:
                logger.info("client closed the connection")
                return
            server.protocol.handle_body(body)
    finally:
        executor.shutdown(wait=False)


def serve(server, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Serve one client on these streams until exit or end of input (pygls' _start_io_async, with our reader)."""
    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout))
    try:
        asyncio.run(_read_loop(server, stdin))
    except BrokenPipeError:
        logger.error("connection to the client is lost; shutting down")
    except (KeyboardInterrupt, SystemExit):  # pygls' exit handler ends the loop with sys.exit
        pass
    finally:
        server.shutdown()


def serve_stdio(server) -> None:
    serve(server, sys.stdin.buffer, sys.stdout.buffer)


def serve_tcp(server, host: str, port: int) -> None:
    """Accept one client and serve it, like pygls' start_tcp (which also stops after its first connection)."""
    with socket.create_server((host, port)) as listener:
        logger.info("listening on %s:%d", host, port)
        conn, _ = listener.accept()
    with conn, conn.makefile("rb") as rfile, conn.makefile("wb") as wfile:
        serve(server, rfile, wfile)
