"""JSON-RPC protocol behaviour of the server: how malformed or unexpected messages are answered."""
from __future__ import annotations

from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol


class CodeCueProtocol(LanguageServerProtocol):
    def structure_message(self, data):
        """Answer a request whose params do not parse (e.g. a negative line) with InvalidParams: pygls would
        only log it, and the client would wait forever."""
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "id" in data and "method" in data:
                self._send_response(data["id"], error=exc.to_response_error())
            raise
