-- Options of the CodeCue plugin: the defaults, and merging what the user passes to setup().
local M = {}

M.defaults = {
  -- How to start the server. CodeCue speaks LSP over stdio.
  cmd = { "codecue-lsp", "--stdio" },
  -- Extra environment for the server process, e.g. { CODECUE_HOME = "/data/models" }.
  cmd_env = nil,
  -- Model pair (models.toml name); nil lets the server use its default ("default").
  pair = nil,
  -- Extra initializationOptions for the server, e.g. { drafter = "lookup", enabledLanguages = { "python" } }.
  init_options = {},
  -- Filetypes to attach to; the server is told the same list (as LSP languageIds, see M.language_id). The
  -- default is the server's own (codecue_lsp/config.py DEFAULT_LANGUAGES).
  -- String keys override the list: { lua = true } adds lua, { go = false } removes go,
  -- { markdown = function(bufnr) ... end } attaches and asks the function per buffer whether to suggest.
  filetypes = {
    "python", "javascript", "javascriptreact", "typescript", "typescriptreact",
    "go", "rust", "java", "c", "cpp",
  },
  -- function(bufnr, path) -> false to never attach a buffer (nothing of it is sent). nil: M.default_should_attach
  -- (attach_rules.lua: no special buffers, none over max_file_bytes, no secret-looking names, no exclude_globs).
  should_attach = nil,
  max_file_bytes = 1000000,
  -- Waits before each automatic restart of a crashed server (recovery.lua); {} never restarts it.
  restart_delays_ms = { 1000, 2000, 4000 },
  -- Hide the ghost text while a completion menu (Neovim's, nvim-cmp's, blink.cmp's) is open.
  hide_during_completion = true,
  -- Suggest while typing. false: only on the trigger key / :CodeCueTrigger.
  auto_trigger = true,
  -- Milliseconds without typing before a request is sent (the server also debounces).
  debounce_ms = 75,
  -- Most tokens per suggestion; nil leaves it to the server.
  max_tokens = nil,
  -- 0..1: the server does not show a suggestion whose first line the model is less sure of; nil: the server's.
  min_confidence = nil,
  -- true: Neovim 0.12's vim.lsp.inline_completion draws the suggestions ("auto": when it exists). Off by default
  -- until that path is tested; false uses the plugin's own ghost text on every version.
  native = false,
  -- Buffer-local insert-mode keys. With no suggestion shown, or the completion menu open, a key does what it
  -- did before: the mapping CodeCue replaced (nvim-cmp, luasnip, your own), a vim.snippet jump for <Tab>, or
  -- the plain key. false: no mapping; call require("codecue.api") from your own keys (cmp, blink.cmp).
  keymaps = {
    accept = "<Tab>",
    accept_word = "<M-Right>",
    accept_line = "<M-l>",
    dismiss = "<C-]>",
    next = "<M-]>", -- cycle to the next suggestion (asks the server for alternatives first)
    prev = "<M-[>",
  },
  -- Highlight group of the ghost text; CodeCueSuggestion links to Comment unless a colourscheme sets it.
  hl_group = "CodeCueSuggestion",
  -- Project context: definitions and similar code from other files of the project in the prompt. nil leaves each
  -- to the server's default (on, "auto" = a third of the prompt, no extra exclusions, 5000 files, cached).
  context = nil,
  context_tokens = nil, -- "auto" or tokens of the prompt for context, 0..16384
  exclude_globs = nil, -- gitignore-style patterns relative to the project root, never indexed nor sent
  max_indexed_files = nil, -- 0..200000
  index_cache = nil, -- keep the index on disk under $CODECUE_HOME/context
  -- What marks a project root, tried in this order up the buffer's parent folders (vim.fs.root: a repository's
  -- .git wins over a nearer package.json); a file under none of them gives its own folder. The server indexes the
  -- roots for project context.
  root_markers = { ".git", "pyproject.toml", "setup.py", "package.json", "go.mod", "Cargo.toml", "pom.xml",
    "build.gradle", "Makefile" },
}

local function is_int(lo, hi)
  return function(v)
    return type(v) == "number" and v == math.floor(v) and v >= lo and v <= hi
  end
end

-- A list whose every entry passes `ok`.
local function is_list_of(ok)
  return function(v)
    if type(v) ~= "table" or not vim.islist(v) then
      return false
    end
    for _, x in ipairs(v) do
      if not ok(x) then
        return false
      end
    end
    return true
  end
end

local function is_string(v)
  return type(v) == "string"
end

local is_string_list = is_list_of(is_string)
-- vim.fs.root's markers: file names, or lists of names of equal priority.
local is_markers = is_list_of(function(x)
  return is_string(x) or is_string_list(x)
end)

local function is_bool(v)
  return type(v) == "boolean"
end

-- Setup keys passed to the server as settings: their server name, check and what the server accepts
-- (codecue_lsp/config.py). The project context options, and the suggestion gate.
M.server_options = {
  { "min_confidence", "minConfidence", function(v) return type(v) == "number" and v >= 0 and v <= 1 end,
    "a number 0..1" },
  { "context", "context", is_bool, "true or false" },
  { "context_tokens", "contextTokens", function(v) return v == "auto" or is_int(0, 16384)(v) end,
    '"auto" or a whole number 0..16384' },
  { "exclude_globs", "excludeGlobs", is_string_list, "a list of gitignore-style patterns" },
  { "max_indexed_files", "maxIndexedFiles", is_int(0, 200000), "a whole number 0..200000" },
  { "index_cache", "indexCache", is_bool, "true or false" },
}

-- Manual trigger key when keymaps.trigger is not set (copilot.lua's default).
M.default_trigger = "<M-\\>"

-- Neovim filetypes whose LSP languageId (what VS Code and the server call the language) differs.
M.language_ids = { sh = "shellscript", bash = "shellscript", zsh = "shellscript", cs = "csharp",
  objc = "objective-c", objcpp = "objective-cpp", tex = "latex", dockerfile = "dockerfile" }

function M.language_id(filetype)
  return M.language_ids[filetype] or filetype
end

-- `filetypes` as given (a list, string-keyed overrides, or both) -> the list to attach to and the overrides.
local function split_filetypes(given)
  local list, overrides = {}, {}
  for _, ft in ipairs(given) do
    table.insert(list, ft)
  end
  if #list == 0 then
    list = vim.deepcopy(M.defaults.filetypes)
  end
  for key, value in pairs(given) do
    if type(key) == "string" then
      overrides[key] = value
    end
  end
  local attach = {}
  for _, ft in ipairs(list) do
    if overrides[ft] ~= false then
      table.insert(attach, ft)
    end
  end
  for ft, value in pairs(overrides) do
    if value ~= false and not vim.tbl_contains(attach, ft) then
      table.insert(attach, ft)
    end
  end
  table.sort(attach)
  return attach, overrides
end

-- A server option the server would ignore is reported and dropped here, so the server's default applies.
local function drop_invalid(cfg)
  for _, option in ipairs(M.server_options) do
    local name, _, valid, expected = unpack(option)
    if cfg[name] ~= nil and not valid(cfg[name]) then
      vim.notify(("CodeCue: ignoring %s = %s: expected %s"):format(name, vim.inspect(cfg[name]), expected),
        vim.log.levels.WARN)
      cfg[name] = nil
    end
  end
  if not is_markers(cfg.root_markers) then
    vim.notify("CodeCue: ignoring root_markers: expected a list of file names", vim.log.levels.WARN)
    cfg.root_markers = vim.deepcopy(M.defaults.root_markers)
  end
end

function M.merge(opts)
  opts = vim.deepcopy(opts or {})
  local filetypes = opts.filetypes or M.defaults.filetypes
  local root_markers = opts.root_markers or M.defaults.root_markers
  -- User lists replace the defaults, they are not merged into them index by index.
  opts.filetypes, opts.root_markers = nil, nil
  local cfg = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts)
  cfg.filetypes, cfg.filetype_overrides = split_filetypes(filetypes)
  cfg.root_markers = vim.deepcopy(root_markers)
  drop_invalid(cfg)
  return cfg
end

-- Server settings that choose where code and keys go and which file is read or written (codecue_lsp/config.py
-- USER_ONLY_SETTINGS, by the server's snake_case name): only setup() sets them, never what a project supplies.
M.user_only = { engine = true, api_key_env = true, log_file = true, remote_ca_bundle = true,
  remote_headers_env = true }

-- A setting's name as the server reads it: apiKeyEnv, api_key_env and api-key-env are one setting.
local function snake_case(key)
  return (tostring(key):gsub("%u", function(c) return "_" .. c:lower() end):gsub("-", "_"))
end

-- Removes the user-only settings from `settings` in place, and from a nested "codecue" section (the server reads it).
function M.drop_user_only(settings)
  if type(settings) ~= "table" then
    return settings
  end
  for key, value in pairs(settings) do
    if M.user_only[snake_case(key)] then
      settings[key] = nil
    elseif key == "codecue" then
      M.drop_user_only(value)
    end
  end
  return settings
end

-- A copy of `options` (initializationOptions) with the user-only settings exactly as setup() gave them in
-- `from_setup` (a copy: `options` may be that very table).
function M.pin_user_only(options, from_setup)
  local pinned = M.drop_user_only(vim.deepcopy(type(options) == "table" and options or {}))
  for key, value in pairs(from_setup) do
    if M.user_only[snake_case(key)] then
      pinned[key] = value
    elseif key == "codecue" and type(value) == "table" then
      pinned.codecue = M.pin_user_only(pinned.codecue, value)
    end
  end
  return pinned
end

-- set_settings(): setup keys (max_tokens, context_tokens, ...) or server names (drafter, middleFrom) -> the
-- "codecue" settings section, or nil and why. The user-only settings are refused: they need setup() and a restart.
function M.runtime_settings(opts)
  if type(opts) ~= "table" then
    return nil, "expected a table of settings"
  end
  local names = { pair = "pair", max_tokens = "maxTokens" }
  for _, option in ipairs(M.server_options) do
    names[option[1]] = option[2]
  end
  local settings = {}
  for key, value in pairs(opts) do
    if M.user_only[snake_case(key)] then
      return nil, key .. " is set only in setup() (it decides where code and keys go)"
    end
    for _, option in ipairs(M.server_options) do
      if (key == option[1] or key == option[2]) and not option[3](value) then
        return nil, ("%s = %s: expected %s"):format(key, vim.inspect(value), option[4])
      end
    end
    settings[names[key] or key] = value
  end
  return settings
end

function M.init_options(cfg)
  -- debounce_ms stays on the client: the server's own debounce (init_options.debounceMs) adds to it.
  -- The server's own default language list is shorter than ours: send the one we attach to.
  local languages = {}
  for _, ft in ipairs(cfg.filetypes) do
    local id = M.language_id(ft)
    if not vim.tbl_contains(languages, id) then
      table.insert(languages, id)
    end
  end
  local options = { pair = cfg.pair, maxTokens = cfg.max_tokens, enabledLanguages = languages }
  for _, option in ipairs(M.server_options) do
    options[option[2]] = cfg[option[1]]
  end
  return vim.tbl_extend("force", options, cfg.init_options or {})
end

return M
