-- The codecue/* notifications the server keeps local counters from, and the plugin's own counters.
-- Each shown suggestion has an id; its accepts (all, word, line, typed through) and its rejection carry it, so
-- the server counts one accepted suggestion per id and adds the accepted characters of each action.
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

local last_id = 0
-- Unique per shown suggestion within this Neovim, and across Neovims sharing a log (the process id).
function M.new_id()
  last_id = last_id + 1
  return ("nvim-%d-%d"):format(vim.fn.getpid(), last_id)
end

-- The LSP position of byte column `col` on 0-based `row`, in the client's encoding.
function M.position(bufnr, row, col, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  return { line = row, character = vim.str_utfindex(line, encoding, math.min(col, #line), false) }
end

-- `shown` is { id, length } of the suggestion as first shown.
function M.shown(client, bufnr, shown)
  M.stats.shown = M.stats.shown + 1
  notify(client, "codecue/didShowCompletion", { uri = vim.uri_from_bufnr(bufnr), length = shown.length,
    id = shown.id })
end

-- One notification per accept action: `text` is what this action inserted (less than the suggestion for a word
-- or a line), starting at LSP `position`.
function M.accepted(client, bufnr, shown, text, position)
  M.stats.accepted = M.stats.accepted + 1
  notify(client, "codecue/didAcceptCompletion", { uri = vim.uri_from_bufnr(bufnr), length = shown.length,
    acceptedLength = M.length(text), id = shown.id, text = text, position = position })
end

function M.rejected(client, bufnr, shown)
  M.stats.rejected = M.stats.rejected + 1
  notify(client, "codecue/didRejectCompletion", { uri = vim.uri_from_bufnr(bufnr), length = shown.length,
    id = shown.id })
end

return M
