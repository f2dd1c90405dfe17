-- The codecue/* notifications the server keeps local counters from, and the plugin's own counters.
local M = {}

M.stats = { requests = 0, cancelled = 0, shown = 0, accepted = 0, rejected = 0, last_latency_ms = nil,
  last_error = nil }

local function notify(client, method, params)
  if client and not client:is_stopped() then
    client:notify(method, params)
  end
end

-- Length in characters. Not vim.fn.strchars: a model can write NUL bytes, and such a string reaches Vimscript
-- as a Blob (E976), which broke BufLeave while a suggestion was shown.
function M.length(text)
  return vim.str_utfindex(text, "utf-32")
end

-- The server's notification params: the document, the suggestion and its length in characters.
local function event(bufnr, text)
  return { uri = vim.uri_from_bufnr(bufnr), text = text, length = M.length(text) }
end

function M.shown(client, bufnr, text)
  M.stats.shown = M.stats.shown + 1
  notify(client, "codecue/didShowCompletion", event(bufnr, text))
end

-- One notification per accept action; accepted_length counts the characters of `text` that this action
-- inserted (less than its length for an accepted word or line), so the server's sums stay right.
function M.accepted(client, bufnr, text, accepted_length)
  M.stats.accepted = M.stats.accepted + 1
  local params = event(bufnr, text)
  params.acceptedLength = accepted_length
  notify(client, "codecue/didAcceptCompletion", params)
end

function M.rejected(client, bufnr, text)
  M.stats.rejected = M.stats.rejected + 1
  notify(client, "codecue/didRejectCompletion", event(bufnr, text))
end

return M
