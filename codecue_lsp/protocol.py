"""JSON-RPC protocol behaviour of the server: how malformed or unexpected messages are answered.

transport.FrameReader cuts the byte stream into bodies; `handle_body` decides what each one is:

- Not JSON (also not UTF-8, or nested too deep), or JSON that is not an object: dropped and logged. Nothing is
  answered: without a readable id no client could match the answer, and an id-null error makes some editors
  (Neovim) report an invalid server message.
- A request is an object with "method" and an "id" that is an integer or a string (LSP's `integer | string`).
  Objects with "method" and any other id (null, float, bool, object) are dropped like garbage.
  Every request gets exactly one response:
    -32600 InvalidRequest   "jsonrpc" is not "2.0", "method" is not a string, its id is already in flight,
                            a second `initialize`, or any request after `shutdown`
    -32002 ServerNotInitialized   any request but `initialize` before `initialize`
    -32602 InvalidParams    params that do not fit the method's type
    -32601 MethodNotFound   unknown methods, `$/` ones included
    otherwise the handler's result (or -32603 / -32800 from pygls).
- A notification (method, no id): dropped before `initialize` (except `exit`) and after `shutdown` (except
  `exit`), dropped with a log line when its params do not fit, dropped silently for an unknown `$/` method, with a
  warning for other unknown methods.
- Anything else with an id (a response to one of our requests) goes to pygls as is.
"""
from __future__ import annotations

import json
import logging

from lsprotocol import types as lsp
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcServerNotInitialized,
)
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage

logger = logging.getLogger(__name__)


def _valid_id(value) -> bool:
    return type(value) is int or type(value) is str  # bool is an int subclass, and not an id


class CodeCueProtocol(LanguageServerProtocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._initialize_received = False

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        # pygls 2.1.1 files the future of every notification (and of every handler a built-in one yields to) in
        # _request_futures under a made-up id, and only a request's response takes its entry out again: one
        # Future, Condition and lock per keystroke, kept forever (the soak's RSS crept ~3 KB a request).
        future = self._request_futures.get(msg_id)
        if future is not None:
            future.add_done_callback(lambda done: self._forget_future(msg_id, done))

    def _forget_future(self, msg_id, future) -> None:
        if self._request_futures.get(msg_id) is future:  # not a later request that reuses the id
            self._request_futures.pop(msg_id, None)

    def handle_body(self, body: bytes) -> None:
        """One frame's body, as cut by transport.FrameReader. Raises only BrokenPipeError (the client is gone):
        whatever else a message does to its handling is logged, and the read loop goes on."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            logger.warning("dropped a frame of %d bytes that is not JSON: %.200s", len(body), exc)
            return
        try:
            self.receive(data)
        except JsonRpcException as exc:
            logger.warning("dropped a message: %s", exc)
        except BrokenPipeError:  # the client is gone: transport.serve ends the connection
            raise
        except Exception:
            logger.exception("dropped a message that broke its handling")

    def receive(self, data) -> None:
        if not isinstance(data, dict):
            logger.warning("dropped a JSON %s that is not a message", type(data).__name__)
            return
        if "method" not in data:
            if "id" in data and data.get("jsonrpc") == self.VERSION:
                self.handle_message(self.structure_message(data))  # a response to one of our requests
            else:
                logger.warning("dropped an object that is neither a JSON-RPC 2.0 request nor a response")
            return
        if "id" in data:
            if _valid_id(data["id"]):
                self._receive_request(data)
            else:
                logger.warning("dropped a request whose id is not an integer or a string: %.100r", data["id"])
            return
        self._receive_notification(data)

    def _receive_request(self, data: dict) -> None:
        msg_id, method = data["id"], data["method"]
        if error := self._refusal(data):
            self._send_response(msg_id, error=error.to_response_error())
            return
        try:
            message = self._structure(data, JsonRPCRequestMessage)
        except JsonRpcInvalidParams as exc:
            self._send_response(msg_id, error=exc.to_response_error())
            return
        if method == lsp.INITIALIZE:
            self._initialize_received = True
        self.handle_message(message)

    def _refusal(self, data: dict) -> JsonRpcException | None:
        msg_id, method = data["id"], data["method"]
        if data.get("jsonrpc") != self.VERSION:
            return JsonRpcInvalidRequest(message='"jsonrpc" must be "2.0"')
        if not isinstance(method, str):
            return JsonRpcInvalidRequest(message='"method" must be a string')
        if self._shutdown:
            return JsonRpcInvalidRequest(message="the server is shutting down")
        if method == lsp.INITIALIZE and self._initialize_received:
            return JsonRpcInvalidRequest(message="initialize may only be sent once")
        if method != lsp.INITIALIZE and not self._initialize_received:
            return JsonRpcServerNotInitialized(message="the server has not been initialized")
        if msg_id in self._request_futures:
            # pygls would overwrite its record of the first request: it could then no longer be cancelled.
            return JsonRpcInvalidRequest(message=f"request id {msg_id!r} is already in use")
        return None

    def _receive_notification(self, data: dict) -> None:
        method = data["method"]
        if data.get("jsonrpc") != self.VERSION or not isinstance(method, str):
            logger.warning("dropped a notification that is not JSON-RPC 2.0: %.100r", method)
            return
        if method != lsp.EXIT and (self._shutdown or not self._initialize_received):
            logger.info("dropped %s: %s", method, "after shutdown" if self._shutdown else "before initialize")
            return
        if method.startswith("$/") and not self._known(method):
            return  # optional protocol notifications: the spec lets a server ignore them without a word
        try:
            message = self._structure(data, JsonRPCNotification)
        except JsonRpcInvalidParams as exc:
            logger.warning("dropped a notification: %s", exc)
            return
        self.handle_message(message)

    def _structure(self, data: dict, default_type):
        """The message as its lsprotocol type. (pygls' structure_message would log a whole traceback for each bad
        message: a client that sends garbage would flood the log.) The envelope is checked before: what does not
        fit is the params."""
        method = data["method"]
        try:
            return self._converter.structure(data, self.get_message_type(method) or default_type)
        except Exception as exc:
            raise JsonRpcInvalidParams(message=f"invalid params for {method}: {exc}") from exc

    def _known(self, method: str) -> bool:
        return method == lsp.CANCEL_REQUEST or method in self.fm.builtin_features or method in self.fm.features
