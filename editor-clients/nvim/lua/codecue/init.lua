-- CodeCue for Neovim: registers the codecue-lsp server and shows its inline completions as ghost text.
--
--   require("codecue").setup({ pair = "default", keymaps = { accept = "<Tab>" } })
local config = require("codecue.config")
local client_config = require("codecue.client_config")
local recovery = require("codecue.recovery")
local telemetry = require("codecue.telemetry")

local M = {}

M.config = nil
M.enabled = true -- global switch (:CodeCueToggle); vim.b.codecue_enabled and M.filetype_enabled narrow it
M.filetype_enabled = {} -- filetype -> false / true / function(bufnr), run-time overrides of config.filetypes
M.progress = {} -- client_id -> last $/progress value from the server (model loading)
M.manual = nil -- { bufnr, tick, row, col } of the last manual trigger (auto_trigger = false still answers it)

function M.use_native(cfg)
  cfg = cfg or M.config
  if not cfg then
    return false
  end
  local available = vim.lsp.inline_completion ~= nil
  if cfg.native == "auto" then
    return available
  end
  return cfg.native == true and available
end

local function frontend()
  return M.use_native() and require("codecue.native") or require("codecue.fallback")
end

function M.client(bufnr)
  return vim.lsp.get_clients({ name = "codecue", bufnr = bufnr })[1]
end

-- Whether suggestions are wanted in this buffer: the global switch, then the buffer's, then its filetype's.
function M.buffer_enabled(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not M.enabled or not M.config or vim.b[bufnr].codecue_enabled == false then
    return false
  end
  local rule = M.filetype_enabled[vim.bo[bufnr].filetype]
  if type(rule) == "function" then
    return rule(bufnr) ~= false
  end
  return rule ~= false
end

local function cursor_key(bufnr)
  local pos = vim.api.nvim_win_get_cursor(0)
  return { bufnr = bufnr, tick = vim.api.nvim_buf_get_changedtick(bufnr), row = pos[1], col = pos[2] }
end

-- With auto_trigger = false only a manual trigger asks the server, and only for the text and cursor it was
-- pressed at: the next keystroke makes it stale, as typing dismisses a suggestion.
local function manual_still_current()
  local m, bufnr = M.manual, vim.api.nvim_get_current_buf()
  return m ~= nil and vim.deep_equal(m, cursor_key(bufnr))
end

-- invoked: the user asked (trigger key, cycling), which also counts with auto_trigger = false.
local function wanted_now(invoked)
  return M.buffer_enabled(0) and (invoked or M.config.auto_trigger or manual_still_current())
end

M.root_dir = client_config.root_dir

-- The server process ended on its own (a crash, a kill): start it again for the buffers it served.
local function on_exit(code, signal, client_id)
  recovery.on_exit(code, signal, client_id, M.start_buffers, M.config.restart_delays_ms)
end

function M.lsp_config(cfg)
  return client_config.lsp_config(cfg or M.config, on_exit)
end

local function define_highlight()
  vim.api.nvim_set_hl(0, "CodeCueSuggestion", { link = "Comment", default = true })
end

local function map_trigger(bufnr, cfg)
  local lhs = cfg.keymaps.trigger
  if lhs == nil then
    lhs = config.default_trigger
  end
  if lhs and lhs ~= "" then
    vim.keymap.set("i", lhs, M.trigger, { buffer = bufnr, desc = "CodeCue: suggest now" })
  end
end

function M.setup(opts)
  if vim.fn.has("nvim-0.11") ~= 1 then
    vim.notify("CodeCue needs Neovim 0.11 or newer", vim.log.levels.ERROR)
    return
  end
  M.config = config.merge(opts)
  local cfg = M.config
  M.filetype_enabled = vim.deepcopy(cfg.filetype_overrides)
  define_highlight()
  require("codecue.fallback").enabled = wanted_now

  local lsp = M.lsp_config(cfg)
  lsp.name = nil
  vim.lsp.config("codecue", lsp)
  vim.lsp.enable("codecue")

  -- The LSP client behind an LspAttach/LspDetach/LspProgress event, when it is CodeCue's.
  local function codecue_client(ev)
    local client = vim.lsp.get_client_by_id(ev.data.client_id)
    return client and client.name == "codecue" and client or nil
  end
  local group = vim.api.nvim_create_augroup("codecue", { clear = true })
  vim.api.nvim_create_autocmd("ColorScheme", { group = group, callback = define_highlight })
  vim.api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(ev)
      local client = codecue_client(ev)
      if client then
        recovery.attached()
        client_config.add_workspace_folder(client, ev.buf, cfg)
        frontend().attach(ev.buf, client, cfg)
        if M.use_native() and not M.buffer_enabled(ev.buf) then
          require("codecue.native").enable(false, ev.buf, client.id)
        end
        map_trigger(ev.buf, cfg)
        -- Both frontends: suggestions are asked for only while typing, so the server is told where the cursor
        -- rests after other moves and prepares that prompt before the first keystroke (cursor_rest.lua).
        require("codecue.cursor_rest").attach(ev.buf)
      end
    end,
  })
  vim.api.nvim_create_autocmd("LspDetach", {
    group = group,
    callback = function(ev)
      if codecue_client(ev) then
        frontend().detach(ev.buf, ev.data.client_id)
        require("codecue.cursor_rest").detach(ev.buf)
      end
    end,
  })
  vim.api.nvim_create_autocmd("LspProgress", {
    group = group,
    callback = function(ev)
      local client = codecue_client(ev)
      if client then
        local value = ev.data.params.value
        M.progress[client.id] = value
        vim.cmd.redrawstatus()
        -- The model just became ready: suggest for where the user is typing instead of waiting for a key.
        if value.kind == "end" and not M.use_native() and vim.api.nvim_get_mode().mode:match("^i") then
          require("codecue.fallback").request(vim.api.nvim_get_current_buf())
        end
      end
    end,
  })
end

-- Ask for a suggestion at the cursor now (the trigger key, :CodeCueTrigger), also with auto_trigger = false.
function M.trigger()
  local bufnr = vim.api.nvim_get_current_buf()
  if not M.config then
    return vim.notify("CodeCue: setup() has not been called", vim.log.levels.WARN)
  end
  if not M.client(bufnr) then
    return vim.notify("CodeCue: no server attached to this buffer", vim.log.levels.WARN)
  end
  if not M.buffer_enabled(bufnr) then
    return vim.notify("CodeCue is off in this buffer (:CodeCueToggle)", vim.log.levels.WARN)
  end
  if M.use_native() then
    return vim.notify("CodeCue: with native = true Neovim requests suggestions itself", vim.log.levels.INFO)
  end
  M.manual = cursor_key(bufnr)
  require("codecue.fallback").request(bufnr, { invoked = true })
end

-- Bring every CodeCue buffer in line with the switches: hide suggestions where they are now off.
local function apply_switches()
  for _, client in ipairs(vim.lsp.get_clients({ name = "codecue" })) do
    for bufnr in pairs(client.attached_buffers) do
      local on = M.buffer_enabled(bufnr)
      if M.use_native() then
        require("codecue.native").enable(on, bufnr, client.id)
      elseif not on then
        require("codecue.fallback").dismiss(bufnr)
      end
    end
  end
end

-- scope: nil / "global", "buffer" (vim.b.codecue_enabled) or "filetype" (this buffer's filetype).
function M.toggle(scope)
  local bufnr = vim.api.nvim_get_current_buf()
  if scope == "buffer" then
    vim.b[bufnr].codecue_enabled = vim.b[bufnr].codecue_enabled == false
    vim.notify("CodeCue " .. (vim.b[bufnr].codecue_enabled and "enabled" or "disabled") .. " in this buffer")
  elseif scope == "filetype" then
    local ft = vim.bo[bufnr].filetype
    M.filetype_enabled[ft] = M.filetype_enabled[ft] == false
    vim.notify("CodeCue " .. (M.filetype_enabled[ft] and "enabled" or "disabled") .. " for " .. ft)
  elseif scope == nil or scope == "" or scope == "global" then
    return M.set_enabled(not M.enabled)
  else
    return vim.notify("CodeCueToggle: expected buffer, filetype or nothing", vim.log.levels.ERROR)
  end
  apply_switches()
end

function M.set_enabled(on)
  M.enabled = on
  apply_switches()
  vim.notify("CodeCue " .. (on and "enabled" or "disabled"))
end

-- Start a server for these buffers (one client: the second buffer reuses the first's). Buffers that are gone,
-- or may not be attached (should_attach), are left out.
function M.start_buffers(buffers)
  for _, bufnr in ipairs(buffers) do
    if vim.api.nvim_buf_is_loaded(bufnr) and client_config.should_attach(bufnr, M.config) then
      local lsp = M.lsp_config()
      lsp.root_dir = M.root_dir(bufnr, M.config.root_markers) -- vim.lsp.start takes a path, not a function
      vim.lsp.start(lsp, { bufnr = bufnr, reuse_client = client_config.reuse_client })
    end
  end
end

-- Stop the server and start a fresh one for the buffers it served (a wedged server, a new model on disk, a
-- crashed one that automatic restarts gave up on).
function M.restart()
  if not M.config then
    return vim.notify("CodeCue: setup() has not been called", vim.log.levels.WARN)
  end
  recovery.reset()
  local buffers, clients = {}, vim.lsp.get_clients({ name = "codecue" })
  local current = vim.api.nvim_get_current_buf()
  if vim.tbl_contains(M.config.filetypes, vim.bo[current].filetype) and vim.bo[current].buftype == "" then
    buffers[current] = true
  end
  for _, client in ipairs(clients) do
    for bufnr in pairs(client.attached_buffers) do
      buffers[bufnr] = true
    end
    client:stop()
  end
  -- Gone means its exit was handled: LspDetach has run, so it cannot detach a buffer from the new client's state.
  local function all_gone()
    return vim.iter(clients):all(function(c) return vim.lsp.get_client_by_id(c.id) == nil end)
  end
  -- A server that does not answer shutdown (stuck loading, say) is killed rather than left running.
  if not vim.wait(5000, all_gone, 20) then
    for _, client in ipairs(clients) do
      client.rpc.terminate()
    end
    vim.wait(2000, all_gone, 20)
  end
  M.progress = {}
  telemetry.stats.last_error = nil
  M.start_buffers(vim.tbl_keys(buffers))
end

-- Change server settings without a restart: setup keys (max_tokens, min_confidence, context_tokens, ...) or the
-- server's own names (drafter, middleFrom, ...). The running server gets workspace/didChangeConfiguration and
-- pulls them; a server started later gets them too. engine, apiKeyEnv, logFile and the other user-only settings
-- are refused (setup() only). Returns true, or false and the reason.
function M.set_settings(opts)
  local settings, err = config.runtime_settings(opts)
  if not settings then
    vim.notify("CodeCue: set_settings: " .. err, vim.log.levels.ERROR)
    return false, err
  end
  client_config.runtime_settings = vim.tbl_extend("force", client_config.runtime_settings, settings)
  for _, client in ipairs(vim.lsp.get_clients({ name = "codecue" })) do
    client_config.push_settings(client)
  end
  return true
end

-- The public API (lua/codecue/api.lua), loaded on first use: for cmp / blink Tab mappings of your own.
for _, name in ipairs({ "is_visible", "accept", "accept_word", "accept_line", "dismiss", "next", "prev" }) do
  M[name] = function(...)
    return require("codecue.api")[name](...)
  end
end

-- "loading 40%", "ready", "off", "crashed (...)", "error: ..." for the current buffer's server.
function M.state(bufnr)
  if not M.config then
    return "setup() not called"
  end
  if not M.buffer_enabled(bufnr) then
    return "off"
  end
  if recovery.crash then
    return recovery.describe()
  end
  local client = M.client(bufnr or 0)
  if not client then
    return "not attached"
  end
  if telemetry.stats.last_error then
    return "error: " .. telemetry.stats.last_error
  end
  local p = M.progress[client.id]
  if p and p.kind == "end" and (p.message or ""):match("fail") then
    return "error: " .. p.message
  end
  if p and p.kind ~= "end" then
    local pct = p.percentage and (" " .. p.percentage .. "%") or ""
    return "loading" .. pct .. (p.message and (" " .. p.message) or "")
  end
  return "ready"
end

-- For a statusline: `%{v:lua.require'codecue'.statusline()}`.
function M.statusline()
  local state = M.state(0)
  local latency = telemetry.stats.last_latency_ms
  if state == "ready" and latency then
    state = state .. " " .. latency .. "ms"
  end
  local counter = not M.use_native() and require("codecue.fallback").counter() or nil
  if counter then
    state = state .. " " .. counter -- which of several suggestions is shown (<M-]> / <M-[> cycle)
  end
  return "CodeCue: " .. state
end

-- The server's own counters (workspace/executeCommand codecue.stats), or nil and an error message.
function M.server_stats(bufnr, timeout_ms)
  local client = M.client(bufnr or 0)
  if not client then
    return nil, "no CodeCue server attached to this buffer"
  end
  local response, err = client:request_sync("workspace/executeCommand",
    { command = "codecue.stats", arguments = {} }, timeout_ms or 2000, bufnr or 0)
  if not response then
    return nil, err
  end
  if response.err then
    return nil, response.err.message
  end
  return response.result
end

function M.status_lines()
  if not M.config then
    return { M.statusline(), 'call require("codecue").setup({}) in your config (see :help codecue)' }
  end
  local lines = { M.statusline(), "frontend: " .. (M.use_native() and "vim.lsp.inline_completion" or "extmarks") }
  local client = M.client(0)
  if client then
    table.insert(lines, ("server: %s (client id %d)"):format(table.concat(client.config.cmd, " "), client.id))
  end
  table.insert(lines, "client counters: " .. vim.inspect(telemetry.stats, { newline = " ", indent = "" }))
  local stats, err = M.server_stats(0, 1000)
  if stats and type(stats.context) == "table" then
    -- The project index in one line; the last prompt's make-up stays in codecue.stats for tools.
    local c = stats.context
    table.insert(lines, c.enabled and ("project index: %d files, %d definitions%s"):format(
      c.files or 0, c.definitions or 0, c.indexing and " (indexing)" or "") or "project index: off")
    stats.context, stats.last_prompt = nil, nil
  end
  table.insert(lines, "server counters: " .. (stats and vim.inspect(stats, { newline = " ", indent = "" }) or err))
  return lines
end

return M
