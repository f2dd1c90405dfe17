-- The vim.lsp configuration of the codecue client: which buffers attach, their project root, the server's
-- settings, and what is never taken from a project's config layer.
local config = require("codecue.config")
local attach_rules = require("codecue.attach_rules")

local M = {}

-- Settings changed at run time (require("codecue").set_settings): the "codecue" section that
-- workspace/configuration answers, also for a server started later (restart, crash recovery).
M.runtime_settings = {}

-- One server per Neovim, whatever the project: every extra process loads the weights again. A buffer of another
-- project adds its root to that server's workspace folders instead (add_workspace_folder).
function M.reuse_client(client, cfg)
  return client.name == cfg.name and not client:is_stopped()
end

-- The project root the server indexes for a buffer: the first root marker found up its folders, else the file's own
-- folder. Never the home directory or "/" (a whole home is not a project), nor a guess for an unnamed buffer.
function M.root_dir(bufnr, markers)
  local root = #markers > 0 and vim.fs.root(bufnr, markers) or nil
  if not root then
    local name = vim.api.nvim_buf_get_name(bufnr)
    root = name ~= "" and vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))) or nil
  end
  if root == nil or root == "/" or root == vim.fs.normalize(vim.uv.os_homedir() or "") then
    return nil
  end
  return root
end

-- Whether a buffer may be attached at all (setup's should_attach, else attach_rules.default).
function M.should_attach(bufnr, cfg)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local path = name ~= "" and vim.fs.normalize(vim.fn.fnamemodify(name, ":p")) or ""
  if cfg.should_attach then
    return cfg.should_attach(bufnr, path) ~= false
  end
  return attach_rules.default(bufnr, path, M.root_dir(bufnr, cfg.root_markers), cfg)
end

local function inside(dir, folder)
  return dir == folder or dir:sub(1, #folder + 1) == folder .. "/"
end

-- Tell the one server about a buffer's project when no workspace folder it has covers it yet
-- (workspace/didChangeWorkspaceFolders), so its project context covers every project being edited.
function M.add_workspace_folder(client, bufnr, cfg)
  local root = M.root_dir(bufnr, cfg.root_markers)
  if not root then
    return
  end
  for _, folder in ipairs(client.workspace_folders or {}) do
    if inside(root, vim.fs.normalize(vim.uri_to_fname(folder.uri))) then
      return
    end
  end
  local folder = { uri = vim.uri_from_fname(root), name = root }
  client:notify("workspace/didChangeWorkspaceFolders", { event = { added = { folder }, removed = {} } })
  client.workspace_folders = client.workspace_folders or {}
  table.insert(client.workspace_folders, folder)
end

-- Answers the server's workspace/configuration as Neovim does, without the user-only settings: settings a project
-- supplies (neoconf reading .vscode/settings.json, a vim.lsp.config in an exrc) cannot redirect code or keys.
local function configuration(err, params, ctx)
  local answer = vim.lsp.handlers["workspace/configuration"](err, params, ctx)
  return type(answer) == "table" and vim.tbl_map(config.drop_user_only, answer) or answer
end

-- Adds the run-time settings to a client's `settings` (in place: the client answers from that very table).
local function add_runtime(settings)
  if next(M.runtime_settings) then
    settings.codecue = vim.tbl_extend("force", type(settings.codecue) == "table" and settings.codecue or {},
      M.runtime_settings)
  end
  return config.drop_user_only(settings)
end

-- Sends changed settings to a running client: workspace/didChangeConfiguration, after which the server pulls
-- the "codecue" section (workspace/configuration) and applies it.
function M.push_settings(client)
  add_runtime(client.settings)
  client:notify("workspace/didChangeConfiguration", { settings = client.settings })
end

-- on_exit(code, signal, client_id) is called when the server process ends (recovery.lua).
function M.lsp_config(cfg, on_exit)
  local init_options = config.init_options(cfg)
  return {
    name = "codecue",
    cmd = cfg.cmd,
    cmd_env = cfg.cmd_env,
    filetypes = cfg.filetypes,
    reuse_client = M.reuse_client,
    -- The first buffer's project: rootUri and workspaceFolders of initialize. Always answered (nil: no root) for
    -- a buffer that may attach, or vim.lsp.enable would not start the server for it; never for one that may not.
    root_dir = function(bufnr, on_dir)
      if M.should_attach(bufnr, cfg) then
        on_dir(M.root_dir(bufnr, cfg.root_markers))
      end
    end,
    -- The server and VS Code name languages by LSP languageId ("shellscript", not Neovim's "sh").
    get_language_id = function(_, filetype)
      return config.language_id(filetype)
    end,
    init_options = init_options,
    settings = {}, -- a table of its own from the start, so the client's `settings` is this one (add_runtime)
    -- Engine, API key variable and log file come only from setup(): not from another vim.lsp.config("codecue")
    -- layer's init_options, nor from `settings` (sent in didChangeConfiguration right after initialize).
    before_init = function(params, lsp_config)
      params.initializationOptions = config.pin_user_only(params.initializationOptions, init_options)
      add_runtime(lsp_config.settings)
    end,
    on_exit = on_exit,
    handlers = { ["workspace/configuration"] = configuration },
  }
end

return M
