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
  st.suggestion, st.shown, st.pending, st.shown_at = nil, nil, nil, nil
  ghost.clear(bufnr)
end

local function show(bufnr, st, s)
  st.suggestion = s
  ghost.show(bufnr, s, M.config.hl_group)
  remember(bufnr, st)
  st.shown_at = { tick = st.tick, cursor = st.cursor } -- accept() inserts only into this state of the buffer
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
  if not M.enabled() or not vim.api.nvim_get_mode().mode:match("^i") or vim.fn.pumvisible() == 1
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

-- The completion menu is open (TextChangedP, CompleteChanged): its entries and the ghost text would both claim
-- the cursor and <Tab>. The menu wins; typing after it closes asks again.
local function on_menu(bufnr)
  local st = buffers[bufnr]
  if st and (st.suggestion or st.inflight) then
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
  telemetry.accepted(client_of(st), bufnr, st.shown.text, telemetry.length(chunk))
  local rest = not whole and suggestion.after_insert(s, chunk) or nil
  if rest then
    st.shown.partly_accepted = true
    show(bufnr, st, rest)
  else
    st.suggestion, st.shown, st.shown_at = nil, nil, nil
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

-- Keys. CodeCue's insert-mode keys are buffer-local. When CodeCue has nothing to do, or the completion menu is
-- open, the key does what it did before, as blink.cmp's and nvim-cmp's "fallback" do: the buffer-local mapping
-- CodeCue replaced, else the global one (looked up at each press: nvim-cmp, luasnip and Neovim's own snippet
-- <Tab> may map it after CodeCue attached), else a snippet jump for <Tab>, else the plain key.

local function is_ours(m)
  return type(m.desc) == "string" and vim.startswith(m.desc, "CodeCue:")
end

local function global_mapping(lhs)
  local key = vim.keycode(lhs)
  for _, m in ipairs(vim.api.nvim_get_keymap("i")) do
    if vim.keycode(m.lhs) == key and not is_ours(m) then
      return m
    end
  end
end

local function plug(name)
  return "<Plug>(codecue-fallback-" .. name .. ")"
end

-- True from feeding a replayed mapping until its keys have run (DONE is fed right after them).
local replaying = false
local DONE = "<Plug>(codecue-fallback-done)"
vim.keymap.set({ "i", "s", "x", "n", "c", "t" }, DONE, function() -- any mode: the replay may leave Insert mode
  replaying = false
end, { desc = "CodeCue: end of a replayed mapping" })

local function fall_through(st, name, lhs)
  local m = not replaying and (st.replaced[name] or global_mapping(lhs))
  if m then
    -- The mapping is copied to a <Plug> key with all it had (expr, Lua callback, remap, the script context of
    -- a Vimscript rhs) and that key is fed with remapping: the mapping runs as if its own key had been pressed.
    local copy = vim.deepcopy(m)
    copy.lhs, copy.lhsraw, copy.lhsrawalt, copy.buffer, copy.mode = plug(name), vim.keycode(plug(name)), nil, 1, "i"
    vim.fn.mapset(copy)
    replaying = true
    vim.schedule(function() -- the same once Neovim waits for input, should DONE never run (an error flushed it)
      replaying = false
    end)
    vim.api.nvim_feedkeys(vim.keycode(plug(name) .. DONE), "im", false)
  elseif not replaying and vim.keycode(lhs) == vim.keycode("<Tab>") and vim.snippet.active({ direction = 1 }) then
    vim.snippet.jump(1)
  else
    -- Also when the replayed mapping sent its own key again (`imap <expr> <Tab> ... "\<Tab>"` remaps): the
    -- plain key, as Vim does when a mapping's keys start with its own lhs.
    vim.api.nvim_feedkeys(vim.keycode(lhs), "in", false)
  end
end

-- keymaps.<name> -> its description; require("codecue.api").<name>() is the action.
local actions = { accept = "CodeCue: accept suggestion", accept_word = "CodeCue: accept next word",
  accept_line = "CodeCue: accept next line", dismiss = "CodeCue: dismiss suggestion" }

local function map(bufnr, st, name, lhs)
  if not lhs or lhs == "" then
    return -- false / "": no mapping; require("codecue.api") offers the same actions for keys mapped elsewhere
  end
  local before = vim.api.nvim_buf_call(bufnr, function()
    return vim.fn.maparg(lhs, "i", false, true)
  end)
  if before.buffer == 1 and not is_ours(before) then
    st.replaced[name] = before
  end
  st.keys[name] = lhs
  vim.keymap.set("i", lhs, function()
    -- With the completion menu open the key belongs to the menu (or to the mapping that drives it).
    if vim.fn.pumvisible() == 1 or not require("codecue.api")[name]() then
      fall_through(st, name, lhs)
    end
  end, { buffer = bufnr, desc = actions[name] })
end

local function unmap(bufnr, st)
  vim.api.nvim_buf_call(bufnr, function()
    for name, lhs in pairs(st.keys) do
      pcall(vim.keymap.del, "i", lhs, { buffer = bufnr })
      pcall(vim.keymap.del, "i", plug(name), { buffer = bufnr })
      if st.replaced[name] then
        vim.fn.mapset(st.replaced[name]) -- what the user (or another plugin) had there before CodeCue
      end
    end
  end)
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
  au({ "InsertLeave", "BufLeave" }, M.dismiss)
  au({ "BufUnload" }, M.detach)
  for name in pairs(actions) do
    map(bufnr, st, name, config.keymaps[name])
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
    pcall(unmap, bufnr, st)
  end
end

M.enabled = function()
  return true
end

return M
