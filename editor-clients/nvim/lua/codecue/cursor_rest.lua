-- When the cursor comes to rest after a move that was not typing (a motion, a click, a jump, another buffer, a
-- file just opened), tell the server (codecue/didMoveCursor) so it prefills the prompt there while the user
-- reads: suggestions are asked for only while typing, so otherwise the first keystroke after a move finds
-- nothing computed (~10 s on a slow CPU). Used by both frontends (fallback.lua and native.lua).
local M = {}

M.METHOD = "codecue/didMoveCursor"
M.REST_MS = 400 -- long enough that holding j sends once, at the end

-- Per attached buffer, its version at the previous cursor event: a move that comes with a new version is typing
-- (or another edit: x, p, u, an accepted suggestion), whose request prepares the prompt itself.
local versions = {}
-- One timer for the editor, since only the current window's cursor can rest; pending = { bufnr, version }.
local timer, pending

-- The buffer's LSP version: its changedtick at the last text change, as didOpen/didChange sent it. Not
-- b:changedtick itself, which :w raises too (resetting 'modified'): a click after saving is no keystroke.
local function version(bufnr)
  local lsp_versions = vim.lsp.util.buf_versions
  return lsp_versions and lsp_versions[bufnr] or vim.api.nvim_buf_get_changedtick(bufnr)
end

function M.cancel()
  pending = nil
  if timer then
    timer:stop()
  end
end

-- Whether the cursor in `bufnr` is one to prepare for now: the current buffer, Normal or Insert mode (a Visual
-- selection is not a place to type at), suggestions on, a running server, and prepareAtCursor not false in
-- the init_options it was started with (the same switch turns the server's side off).
local function wanted(bufnr)
  if vim.api.nvim_get_current_buf() ~= bufnr or not vim.api.nvim_get_mode().mode:match("^[ni]") then
    return nil
  end
  local codecue = require("codecue")
  local client = codecue.client(bufnr)
  if not client or client:is_stopped() or (client.config.init_options or {}).prepareAtCursor == false then
    return nil
  end
  return codecue.buffer_enabled(bufnr) and client or nil
end

local function send(client, bufnr)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.textDocument.version = version(bufnr)
  client:notify(M.METHOD, params) -- false when the server is gone: it just misses the hint, as in telemetry.lua
end

-- Checked again when the rest ends: an edit without a cursor move (x at the line end, a formatter) or a switch
-- away since leaves nothing to prepare. The position is the one now.
local function fire()
  local p = pending
  pending = nil
  if not p or not vim.api.nvim_buf_is_valid(p.bufnr) or version(p.bufnr) ~= p.version then
    return
  end
  local client = wanted(p.bufnr)
  if client then
    send(client, p.bufnr)
  end
end

-- Every move restarts the wait, so a rest sends once, for where the cursor ended.
local function schedule(bufnr, v)
  M.cancel()
  if not wanted(bufnr) then
    return
  end
  timer = timer or vim.uv.new_timer()
  pending = { bufnr = bufnr, version = v }
  timer:start(M.REST_MS, 0, vim.schedule_wrap(fire))
end

-- CursorMoved / CursorMovedI (focus = false) and BufEnter (focus = true: entering a buffer is never typing, and
-- what was changed while it was hidden is no keystroke here).
function M.moved(bufnr, focus)
  local now = version(bufnr)
  local before = versions[bufnr]
  versions[bufnr] = now
  if not focus and before ~= nil and before ~= now then
    M.cancel()
    return
  end
  schedule(bufnr, now)
end

-- On LspAttach: the buffer was just opened (or its server started again), so where its cursor is counts as a move.
function M.attach(bufnr)
  versions[bufnr] = nil
  local group = vim.api.nvim_create_augroup("codecue.cursor." .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd({ "CursorMoved", "CursorMovedI" }, {
    group = group, buffer = bufnr, callback = function() M.moved(bufnr, false) end,
  })
  vim.api.nvim_create_autocmd("BufEnter", {
    group = group, buffer = bufnr, callback = function() M.moved(bufnr, true) end,
  })
  if vim.api.nvim_get_current_buf() == bufnr then
    M.moved(bufnr, true)
  end
end

function M.detach(bufnr)
  versions[bufnr] = nil
  if pending and pending.bufnr == bufnr then
    M.cancel()
  end
  pcall(vim.api.nvim_del_augroup_by_name, "codecue.cursor." .. bufnr)
end

-- For tests and :CodeCueStatus-style probes: whether a notification is waiting for the rest to end.
function M.pending()
  return pending ~= nil
end

return M
