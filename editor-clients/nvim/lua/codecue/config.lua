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
  filetypes = {
    "python", "javascript", "javascriptreact", "typescript", "typescriptreact",
    "go", "rust", "java", "c", "cpp", "lua", "sh",
  },
  root_markers = { ".git", "pyproject.toml", "package.json", "go.mod", "Cargo.toml" },
  -- Milliseconds without typing before a request is sent (the server also debounces).
  debounce_ms = 75,
  -- Most tokens per suggestion; nil leaves it to the server.
  max_tokens = nil,
  -- "auto": vim.lsp.inline_completion on Neovim >= 0.12, the plugin's own ghost text on 0.11.
  -- true / false force one or the other.
  native = "auto",
  keymaps = {
    accept = "<Tab>", -- falls back to a normal <Tab> when no suggestion is shown
    accept_word = "<M-Right>",
    accept_line = "<M-l>",
    dismiss = "<C-]>",
  },
  -- Highlight group of the ghost text.
  hl_group = "Comment",
}

function M.merge(opts)
  return vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
end

function M.init_options(cfg)
  -- debounce_ms stays on the client: the server's own debounce (init_options.debounceMs) adds to it.
  local options = { pair = cfg.pair, maxTokens = cfg.max_tokens }
  return vim.tbl_extend("force", options, cfg.init_options or {})
end

return M
