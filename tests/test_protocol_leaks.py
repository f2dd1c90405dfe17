"""Nothing the protocol layer keeps per message may outlive the message."""
import asyncio
import json

from codecue_lsp.server import make_server


class Sink:
    def __init__(self):
        self.data = []

    def write(self, data: bytes) -> None:
        self.data.append(data)

    def close(self) -> None:
        pass


def test_notifications_leave_no_futures_behind():
    """pygls 2.1.1 files a Future per notification handled by a built-in generator handler in _request_futures and
    never takes it out: one per keystroke, kept forever (the soak found it as a steady RSS creep)."""
    async def main():
        server = make_server({})
        protocol = server.protocol
        protocol.set_writer(Sink())
        uri = "file:///leak.py"

        def body(message: dict) -> bytes:
            return json.dumps({"jsonrpc": "2.0", **message}).encode()

        protocol.handle_body(body({"id": 1, "method": "initialize", "params": {"capabilities": {}}}))
        protocol.handle_body(body({"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n"}}}))
        for version in range(2, 202):
            protocol.handle_body(body({"method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": {"line": 0, "character": 4},
                                              "end": {"line": 0, "character": 5}}, "text": str(version % 10)}]}}))
        protocol.handle_body(body({"method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}}))
        for _ in range(3):
            await asyncio.sleep(0)  # done-callbacks run on the loop
        assert server.workspace.text_documents.get(uri) is None  # the notifications were handled
        assert len(protocol._request_futures) == 0, len(protocol._request_futures)
    asyncio.run(main())
