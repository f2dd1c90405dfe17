-- Inline completion for Neovim 0.11 (no vim.lsp.inline_completion there): request while typing with a
-- debounce, cancel the in-flight request on the next keystroke, draw ghost text, accept all / a word / a line.
local suggestion = require("codecue.suggestion")
local ghost = require("codecue.ghost")
local telemetry = require("codecue.telemetry")

local M = {}

-- Per attached buffer: client_id, timer, inflight {id, tick, cursor}, suggestion, tick/cursor last seen,
-- pending (the suggestion if the key being typed matches it), shown {text} (as first shown, for telemetry).
local buffers = {}
M.buffers = buffers

local function cursor_of(winid)
  local pos = vim.api.nvim_win_get_cursor(winid or 0)
  return { pos[1] - 1, pos[2] }
end

local function same_pos(a, b)
  return a ~= nil and b ~= nil and a[1] == b[1] and a[2] == b[2]
end

local function client_of(st)
  return vim.lsp.get_client_by_id(st.client_id)
end

local function cancel_inflight(st)
  local inflight = st.inflight
  st.inflight = nil
  if st.timer then
    st.timer:stop()
  end
  local client = client_of(st)
  if inflight and client then
    client:cancel_request(inflight.id)
    telemetry.stats.cancelled = telemetry.stats.cancelled + 1
  end
end

local function remember(bufnr, st)
  st.tick = vim.api.nvim_buf_get_changedtick(bufnr)
  st.cursor = cursor_of()
end

local function dismiss(bufnr, st, reason)
  if st.suggestion and st.shown and not st.shown.partly_accepted and reason == "reject" then
    telemetry.rejected(client_of(st), bufnr, st.shown.text)
  end
  st.suggestion, st.shown, st.pending = nil, nil, nil
  ghost.clear(bufnr)
end

local function show(bufnr, st, s)
  st.suggestion = s
  ghost.show(bufnr, s, M.config.hl_group)
  remember(bufnr, st)
end

-- Convert the first usable item of a response into a suggestion at the cursor.
local function pick(result, bufnr, encoding)
  local items = result and (result.items or result) or {}
  local row, col = unpack(cursor_of())
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, true)[1]
  for _, item in ipairs(items) do
    local text = type(item.insertText) == "table" and item.insertText.value or item.insertText
    local range
    if item.range then
      local r = item.range
      local function byte(pos)
        return vim.str_byteindex(line, encoding, math.min(pos.character, vim.str_utfindex(line, encoding)), false)
      end
      range = { r.start.line, byte(r.start), r["end"].line, byte(r["end"]) }
    end
    local s = suggestion.from_item(text, range, line, row, col)
    if s then
      return s
    end
  end
end

local function on_response(bufnr, st, request, err, result)
  if st.inflight ~= request then
    return -- superseded or cancelled: never show text for an older state of the buffer
  end
  st.inflight = nil
  telemetry.stats.last_latency_ms = math.floor((vim.uv.hrtime() - request.started) / 1e6)
  vim.cmd.redrawstatus() -- statuslines showing require("codecue").statusline() pick up the latency
  if err then
    if err.code ~= -32800 then
      telemetry.stats.last_error = err.message
    end
    return
  end
  telemetry.stats.last_error = nil
  if not M.enabled() or not vim.api.nvim_get_mode().mode:match("^i")
    or vim.api.nvim_get_current_buf() ~= bufnr
    or vim.api.nvim_buf_get_changedtick(bufnr) ~= request.tick or not same_pos(cursor_of(), request.cursor) then
    return
  end
  local client = client_of(st)
  local s = client and pick(result, bufnr, client.offset_encoding)
  if s then
    show(bufnr, st, s)
    st.shown = { text = s.text }
    telemetry.shown(client, bufnr, s.text)
  end
end

function M.request(bufnr)
  local st = buffers[bufnr]
  local client = st and client_of(st)
  if not client or not M.enabled() or vim.api.nvim_get_current_buf() ~= bufnr then
    return
  end
  cancel_inflight(st)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 2 } -- Automatic: typing, not an explicit invocation
  local request = { tick = vim.api.nvim_buf_get_changedtick(bufnr), cursor = cursor_of(), started = vim.uv.hrtime() }
  local ok, id = client:request("textDocument/inlineCompletion", params, function(err, result)
    on_response(bufnr, st, request, err, result)
  end, bufnr)
  if ok then
    request.id = id
    st.inflight = request
    telemetry.stats.requests = telemetry.stats.requests + 1
  end
end

local function schedule_request(bufnr, st)
  st.timer = st.timer or vim.uv.new_timer()
  st.timer:stop()
  st.timer:start(M.config.debounce_ms, 0, vim.schedule_wrap(function()
    if buffers[bufnr] == st then
      M.request(bufnr)
    end
  end))
end

-- Called on TextChangedI and CursorMovedI: keep, advance, drop or re-request the suggestion.
local function on_change(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  local tick, cursor = vim.api.nvim_buf_get_changedtick(bufnr), cursor_of()
  if tick == st.tick and same_pos(cursor, st.cursor) then
    return
  end
  local pending = st.pending
  st.pending = nil
  if type(pending) == "table" and same_pos(cursor, { pending.row, pending.col }) then
    show(bufnr, st, pending) -- typed the start of the suggestion: keep showing the rest
    return
  end
  local edited = tick ~= st.tick
  dismiss(bufnr, st, pending == "typed all" and "done" or "reject")
  remember(bufnr, st)
  if edited and M.enabled() then
    schedule_request(bufnr, st)
  else
    cancel_inflight(st)
  end
end

local function on_char(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  cancel_inflight(st)
  local s, typed = st.suggestion, vim.v.char
  if s and typed ~= "" and vim.startswith(s.text, typed) then
    st.pending = suggestion.after_typing(s, typed) or "typed all" -- the user is typing the suggestion itself
  elseif s then
    dismiss(bufnr, st, "reject")
  end
end

function M.visible(bufnr)
  local st = buffers[bufnr or vim.api.nvim_get_current_buf()]
  return st ~= nil and st.suggestion ~= nil
end

-- Accept the whole suggestion ("all"), its next word or its next line. Returns true when text was inserted.
function M.accept(kind)
  local bufnr = vim.api.nvim_get_current_buf()
  local st = buffers[bufnr]
  local s = st and st.suggestion
  if not s then
    return false
  end
  local chunk = kind == "word" and suggestion.next_word(s.text) or kind == "line" and suggestion.next_line(s.text)
    or s.text
  local lines = vim.split(chunk, "\n", { plain = true })
  local whole = chunk == s.text
  local replaced_end = s.col + (whole and #s.tail or 0)
  vim.api.nvim_buf_set_text(bufnr, s.row, s.col, s.row, replaced_end, lines)
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  telemetry.accepted(client_of(st), bufnr, st.shown.text, vim.fn.strchars(chunk))
  local rest = not whole and suggestion.after_insert(s, chunk) or nil
  if rest then
    st.shown.partly_accepted = true
    show(bufnr, st, rest)
  else
    st.suggestion, st.shown = nil, nil
    ghost.clear(bufnr)
    remember(bufnr, st)
    schedule_request(bufnr, st) -- offer what comes next, as after typing
  end
  return true
end

function M.dismiss(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local st = buffers[bufnr]
  if st then
    cancel_inflight(st)
    dismiss(bufnr, st, "reject")
    remember(bufnr, st)
  end
end

local function map(bufnr, lhs, action, desc)
  if not lhs or lhs == "" then
    return
  end
  vim.keymap.set("i", lhs, function()
    if M.visible(bufnr) then
      return "<Cmd>lua require('codecue.fallback')." .. action .. "<CR>"
    end
    return lhs
  end, { buffer = bufnr, expr = true, replace_keycodes = true, desc = desc })
end

function M.attach(bufnr, client, config)
  M.config = config
  if buffers[bufnr] then
    buffers[bufnr].client_id = client.id
    return
  end
  local st = { client_id = client.id }
  buffers[bufnr] = st
  remember(bufnr, st)
  local group = vim.api.nvim_create_augroup("codecue.buffer." .. bufnr, { clear = true })
  local function au(events, fn)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = function() fn(bufnr) end })
  end
  au("InsertCharPre", on_char)
  au({ "TextChangedI", "CursorMovedI" }, on_change)
  au({ "InsertLeave", "BufLeave" }, M.dismiss)
  au({ "BufUnload" }, M.detach)
  local keys = config.keymaps
  map(bufnr, keys.accept, "accept('all')", "CodeCue: accept suggestion")
  map(bufnr, keys.accept_word, "accept('word')", "CodeCue: accept next word")
  map(bufnr, keys.accept_line, "accept('line')", "CodeCue: accept next line")
  map(bufnr, keys.dismiss, "dismiss()", "CodeCue: dismiss suggestion")
end

function M.detach(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  cancel_inflight(st)
  if st.timer then
    st.timer:close()
  end
  buffers[bufnr] = nil
  ghost.clear(bufnr)
  pcall(vim.api.nvim_del_augroup_by_name, "codecue.buffer." .. bufnr)
end

M.enabled = function()
  return true
end

return M
