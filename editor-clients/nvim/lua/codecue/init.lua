-- CodeCue for Neovim: registers the codecue-lsp server and shows its inline completions as ghost text.
--
--   require("codecue").setup({ pair = "default", keymaps = { accept = "<Tab>" } })
local config = require("codecue.config")
local telemetry = require("codecue.telemetry")

local M = {}

M.config = nil
M.enabled = true
M.progress = {} -- client_id -> last $/progress value from the server (model loading)

function M.use_native(cfg)
  cfg = cfg or M.config
  local available = vim.lsp.inline_completion ~= nil
  if cfg.native == "auto" then
    return available
  end
  return cfg.native and available
end

local function frontend()
  return M.use_native() and require("codecue.native") or require("codecue.fallback")
end

function M.client(bufnr)
  return vim.lsp.get_clients({ name = "codecue", bufnr = bufnr })[1]
end

function M.setup(opts)
  if vim.fn.has("nvim-0.11") ~= 1 then
    vim.notify("CodeCue needs Neovim 0.11 or newer", vim.log.levels.ERROR)
    return
  end
  M.config = config.merge(opts)
  local cfg = M.config
  require("codecue.fallback").enabled = function()
    return M.enabled
  end

  vim.lsp.config("codecue", {
    cmd = cfg.cmd,
    cmd_env = cfg.cmd_env,
    filetypes = cfg.filetypes,
    root_markers = cfg.root_markers,
    init_options = config.init_options(cfg),
  })
  vim.lsp.enable("codecue")

  -- The LSP client behind an LspAttach/LspDetach/LspProgress event, when it is CodeCue's.
  local function codecue_client(ev)
    local client = vim.lsp.get_client_by_id(ev.data.client_id)
    return client and client.name == "codecue" and client or nil
  end
  local group = vim.api.nvim_create_augroup("codecue", { clear = true })
  vim.api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(ev)
      local client = codecue_client(ev)
      if client then
        frontend().attach(ev.buf, client, cfg)
      end
    end,
  })
  vim.api.nvim_create_autocmd("LspDetach", {
    group = group,
    callback = function(ev)
      if codecue_client(ev) then
        frontend().detach(ev.buf)
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

function M.toggle()
  M.set_enabled(not M.enabled)
end

function M.set_enabled(on)
  M.enabled = on
  if M.config and M.use_native() then
    vim.lsp.inline_completion.enable(on)
  elseif not on then
    for bufnr in pairs(require("codecue.fallback").buffers) do
      require("codecue.fallback").dismiss(bufnr)
    end
  end
  vim.notify("CodeCue " .. (on and "enabled" or "disabled"))
end

-- "loading 40%", "ready", "off", "error: ..." for the current buffer's server.
function M.state(bufnr)
  if not M.enabled then
    return "off"
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
  local lines = { M.statusline(), "frontend: " .. (M.use_native() and "vim.lsp.inline_completion" or "extmarks") }
  local client = M.client(0)
  if client then
    table.insert(lines, ("server: %s (client id %d)"):format(table.concat(client.config.cmd, " "), client.id))
  end
  table.insert(lines, "client counters: " .. vim.inspect(telemetry.stats, { newline = " ", indent = "" }))
  local stats, err = M.server_stats(0, 1000)
  table.insert(lines, "server counters: " .. (stats and vim.inspect(stats, { newline = " ", indent = "" }) or err))
  return lines
end

return M
