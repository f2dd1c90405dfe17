"""codecue_bench.health: the one /health wait of the benchmarks and the shell scripts, against a real HTTP server."""
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codecue_bench.health import main, pid_alive, wait_healthy


@pytest.fixture
def loading_server():
    """/health: 503 for the first three asks (loading), then 200."""
    asks = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asks.append(self.path)
            self.send_response(200 if self.path == "/health" and len(asks) > 3 else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asks
    server.shutdown()
    server.server_close()


def test_waits_through_503_until_200(loading_server):
    url, asks = loading_server
    wait_healthy(url, lambda: True, timeout_s=10, poll_s=0.01)
    assert asks == ["/health"] * 4


def test_a_process_that_ends_stops_the_wait(loading_server):
    url, asks = loading_server
    with pytest.raises(RuntimeError, match="llama-server exited"):
        wait_healthy(url, lambda: False, timeout_s=10, poll_s=0.01, name="llama-server")
    assert asks == []


def test_nothing_listening_times_out():
    with pytest.raises(TimeoutError, match="not ready after"):
        wait_healthy("http://127.0.0.1:9", lambda: True, timeout_s=0.2, poll_s=0.05)


def test_the_command_line_watches_a_pid(loading_server):
    url, _ = loading_server
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid) and pid_alive(subprocess.os.getpid())
    assert main([url, str(child.pid), "--poll", "0.01"]) == 1  # exited: no wait for /health
    assert main([url, str(subprocess.os.getpid()), "--poll", "0.01", "--timeout", "10"]) == 0
