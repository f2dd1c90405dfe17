-- Inline completion for Neovim 0.11 (no vim.lsp.inline_completion there): request while typing with a
-- debounce, cancel the in-flight request on the next keystroke, draw ghost text, accept all / a word / a line.
local suggestion = require("codecue.suggestion")
local items = require("codecue.items")
local ghost = require("codecue.ghost")
local telemetry = require("codecue.telemetry")
local keys = require("codecue.keys")
local menus = require("codecue.menus")

local M = {}

-- Per attached buffer: client_id, timer, inflight {id, tick, cursor, invoked, cycle}, suggestion, tick/cursor
-- last seen, pending (the suggestion if the key being typed matches it), list {items, index} (the suggestions
-- to cycle through), shown {id, length, rest, partly_accepted} (telemetry of the suggestion as first shown; rest
-- {text, row, col}: its part not accepted yet, where it starts).
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

local function reject_shown(bufnr, st)
  if st.suggestion and st.shown and not st.shown.partly_accepted then
    telemetry.rejected(client_of(st), bufnr, st.shown)
  end
end

local typed_through -- defined with the accept actions below

local function dismiss(bufnr, st, reason)
  if reason == "reject" then
    reject_shown(bufnr, st)
  end
  st.suggestion, st.shown, st.pending, st.shown_at, st.list = nil, nil, nil, nil, nil
  ghost.clear(bufnr)
end

-- "2/3" while several suggestions can be cycled through, else nil.
local function counter(st)
  local list = st.list
  return list and #list.items > 1 and ("%d/%d"):format(list.index, #list.items) or nil
end

local function show(bufnr, st, s)
  st.suggestion = s
  ghost.show(bufnr, s, M.config.hl_group, counter(st))
  remember(bufnr, st)
  st.shown_at = { tick = st.tick, cursor = st.cursor } -- accept() inserts only into this state of the buffer
end

-- A new suggestion on screen: the one shown before (another of the list, when cycling) counts as rejected.
local function show_new(bufnr, st, s)
  reject_shown(bufnr, st)
  show(bufnr, st, s)
  st.shown = { id = telemetry.new_id(), length = telemetry.length(s.text),
    rest = { text = s.text, row = s.row, col = s.col } }
  telemetry.shown(client_of(st), bufnr, st.shown)
end

-- One suggestion left to cycle through: after typing into it or accepting part of it, the others no longer fit.
local function single(st, s)
  st.list = { items = { s }, index = 1 }
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
  if not M.enabled(request.invoked) or not vim.api.nvim_get_mode().mode:match("^i")
    or (M.config.hide_during_completion and menus.visible()) or vim.api.nvim_get_current_buf() ~= bufnr
    or vim.api.nvim_buf_get_changedtick(bufnr) ~= request.tick or not same_pos(cursor_of(), request.cursor) then
    return
  end
  local client = client_of(st)
  local found = client and items.from_response(result, bufnr, cursor_of(), client.offset_encoding) or {}
  if #found == 0 then
    return
  end
  local index = items.first_index(found, st.suggestion, request.cycle)
  st.list = { items = found, index = index }
  if st.suggestion and st.suggestion.text == found[index].text then
    return show(bufnr, st, found[index]) -- the same suggestion, now with its counter
  end
  show_new(bufnr, st, found[index])
end

-- Asks for suggestions at the cursor. opts.invoked: the user asked (trigger key, cycling), so the server may
-- answer several (LSP triggerKind Invoked); opts.cycle = 1 / -1: then show the next / previous one.
function M.request(bufnr, opts)
  opts = opts or {}
  local st = buffers[bufnr]
  local client = st and client_of(st)
  if not client or not M.enabled(opts.invoked) or vim.api.nvim_get_current_buf() ~= bufnr then
    return
  end
  cancel_inflight(st)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = opts.invoked and 1 or 2 } -- 1 Invoked, 2 Automatic (typing)
  local request = { tick = vim.api.nvim_buf_get_changedtick(bufnr), cursor = cursor_of(), started = vim.uv.hrtime(),
    invoked = opts.invoked, cycle = opts.cycle }
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

local function report_accept(bufnr, st, text, row, col)
  local client = client_of(st)
  if client then
    telemetry.accepted(client, bufnr, st.shown, text, telemetry.position(bufnr, row, col, client.offset_encoding))
  end
end

-- The user typed the suggestion to its end: an accept of what was not accepted before (all of it, or what a
-- word or line accept left), less the text after the cursor it ends with (already there, not typed).
typed_through = function(bufnr, st)
  local s, rest = st.suggestion, st.shown and st.shown.rest
  if not s or not rest then
    return
  end
  local text = rest.text
  if s.tail ~= "" and vim.endswith(text, s.tail) then
    text = text:sub(1, #text - #s.tail)
  end
  report_accept(bufnr, st, text, rest.row, rest.col)
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
    single(st, pending)
    show(bufnr, st, pending) -- typed the start of the suggestion: keep showing the rest
    return
  end
  local edited = tick ~= st.tick
  if pending == "typed all" then
    typed_through(bufnr, st)
  end
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

-- A completion menu opened (TextChangedP, CompleteChanged, nvim-cmp's and blink.cmp's open events): its entries
-- and the ghost text would both claim the cursor and <Tab>. The menu wins; typing after it closes asks again.
local function on_menu(bufnr)
  local st = buffers[bufnr]
  if st and M.config.hide_during_completion and (st.suggestion or st.inflight) then
    cancel_inflight(st)
    dismiss(bufnr, st, "reject")
  end
end

-- The suggestion that is still valid at the cursor, or nil. TextChangedI and CursorMovedI wait until no keys
-- are pending, so a key pressed right after typing or after a <Cmd> edit ("f<Tab>" arriving together) can come
-- before they fire: catch up first, then insert only into the buffer state the suggestion was shown for.
local function current(bufnr, st)
  if vim.api.nvim_get_current_buf() ~= bufnr then
    return nil
  end
  on_change(bufnr)
  local at = st.shown_at
  if st.suggestion and not (at and at.tick == vim.api.nvim_buf_get_changedtick(bufnr)
      and same_pos(at.cursor, cursor_of())) then
    dismiss(bufnr, st, "reject")
    remember(bufnr, st)
  end
  return st.suggestion
end

function M.visible(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local st = buffers[bufnr]
  return st ~= nil and current(bufnr, st) ~= nil
end

-- Accept the whole suggestion ("all"), its next word or its next line. Returns true when text was (or, from
-- an expr mapping, will be) inserted.
function M.accept(kind)
  local bufnr = vim.api.nvim_get_current_buf()
  local st = buffers[bufnr]
  local s = st and current(bufnr, st)
  if not s then
    return false
  end
  local chunk = kind == "word" and suggestion.next_word(s.text) or kind == "line" and suggestion.next_line(s.text)
    or s.text
  local lines = vim.split(chunk, "\n", { plain = true })
  local whole = chunk == s.text
  local replaced_end = s.col + (whole and #s.tail or 0)
  local ok, err = pcall(vim.api.nvim_buf_set_text, bufnr, s.row, s.col, s.row, replaced_end, lines)
  if not ok then
    if not tostring(err):match("E565") then
      error(err)
    end
    -- Called from an expr mapping (blink.cmp and nvim-cmp run keymap functions in one), where the text is
    -- locked: insert right after the mapping's own keys; that call checks the suggestion again.
    local again = ("<Cmd>lua require('codecue.fallback').accept(%q)<CR>"):format(kind or "all")
    vim.api.nvim_feedkeys(vim.keycode(again), "in", false)
    return true
  end
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  report_accept(bufnr, st, chunk, s.row, s.col)
  local rest = not whole and suggestion.after_insert(s, chunk) or nil
  if rest then
    st.shown.partly_accepted = true
    st.shown.rest = { text = rest.text, row = rest.row, col = rest.col }
    single(st, rest)
    show(bufnr, st, rest)
  else
    st.suggestion, st.shown, st.shown_at, st.list = nil, nil, nil, nil
    ghost.clear(bufnr)
    remember(bufnr, st)
    schedule_request(bufnr, st) -- offer what comes next, as after typing
  end
  return true
end

-- Returns true when a suggestion was shown (and is now gone).
function M.dismiss(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local st = buffers[bufnr]
  if not st then
    return false
  end
  local had = st.suggestion ~= nil
  cancel_inflight(st)
  dismiss(bufnr, st, "reject")
  remember(bufnr, st)
  return had
end

-- Show the next (direction 1) or previous (-1) suggestion. With only one at hand, ask the server for
-- alternatives at the cursor (Invoked) and show the next of its answer. Returns false when not attached.
function M.cycle(direction)
  local bufnr = vim.api.nvim_get_current_buf()
  local st = buffers[bufnr]
  if not st or not M.enabled(true) then
    return false
  end
  local s = current(bufnr, st)
  local list = st.list
  if s and list and #list.items > 1 then
    list.index = (list.index - 1 + direction) % #list.items + 1
    show_new(bufnr, st, list.items[list.index])
  else
    M.request(bufnr, { invoked = true, cycle = s and direction or nil })
  end
  return true
end

-- "2/3" while the buffer's suggestion is one of several, else nil (the statusline shows it).
function M.counter(bufnr)
  local st = buffers[bufnr or vim.api.nvim_get_current_buf()]
  return st and st.suggestion and counter(st) or nil
end

function M.attach(bufnr, client, config)
  M.config = config
  if buffers[bufnr] then
    buffers[bufnr].client_id = client.id
    return
  end
  local st = { client_id = client.id, keys = {}, replaced = {} }
  buffers[bufnr] = st
  remember(bufnr, st)
  local group = vim.api.nvim_create_augroup("codecue.buffer." .. bufnr, { clear = true })
  local function au(events, fn)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = function() fn(bufnr) end })
  end
  au("InsertCharPre", on_char)
  au({ "TextChangedI", "CursorMovedI" }, on_change)
  au({ "TextChangedP", "CompleteChanged" }, on_menu)
  menus.watch("fallback", on_menu)
  au({ "InsertLeave", "BufLeave" }, M.dismiss)
  au({ "BufUnload" }, M.detach)
  for name in pairs(keys.actions) do
    keys.map(bufnr, st, name, config.keymaps[name])
  end
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
  if vim.api.nvim_buf_is_valid(bufnr) then
    keys.unmap(bufnr, st)
  end
end

-- Whether to ask / show now; invoked: the user asked (init.lua sets it from the switches and auto_trigger).
M.enabled = function(invoked)
  return true
end

return M
