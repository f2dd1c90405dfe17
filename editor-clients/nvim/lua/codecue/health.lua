-- :checkhealth codecue
local M = {}

function M.check()
  local health = vim.health
  health.start("CodeCue")
  local v = vim.version()
  if vim.fn.has("nvim-0.11") == 1 then
    health.ok(("Neovim %d.%d.%d"):format(v.major, v.minor, v.patch))
  else
    health.error("Neovim 0.11 or newer is needed (vim.lsp.config / vim.lsp.enable)")
  end

  local codecue = require("codecue")
  if not codecue.config then
    health.warn("setup() has not been called", { 'Add require("codecue").setup({}) to your config' })
    return
  end
  if codecue.use_native() then
    health.ok("ghost text: vim.lsp.inline_completion (Neovim 0.12+)")
  else
    health.ok("ghost text: CodeCue's extmarks (Neovim 0.11)")
  end

  local languages = require("codecue.config").init_options(codecue.config).enabledLanguages
  health.info("languages the server is told to complete: " .. table.concat(languages, ", "))
  if not codecue.config.auto_trigger then
    health.info("auto_trigger = false: suggestions only on the trigger key or :CodeCueTrigger")
  end

  local exe = codecue.config.cmd[1]
  if vim.fn.executable(exe) == 1 then
    health.ok(("server command found: %s"):format(vim.fn.exepath(exe)))
  else
    health.error(("server command not found: %s"):format(exe),
      { "pip install codecue (in a venv) and put its bin/ on PATH, or set cmd in setup()" })
  end

  local client = codecue.client(0)
  if not client then
    health.info("no CodeCue server attached to the current buffer (filetypes: "
      .. table.concat(codecue.config.filetypes, ", ") .. ")")
    return
  end
  health.ok(("server attached (client id %d), state: %s"):format(client.id, codecue.state(0)))
  if not client.server_capabilities.inlineCompletionProvider then
    health.error("the server does not advertise inlineCompletionProvider")
  end
  local stats, err = codecue.server_stats(0, 1000)
  if stats then
    health.ok("server counters: " .. vim.inspect(stats, { newline = " ", indent = "" }))
  else
    health.warn("codecue.stats failed: " .. tostring(err))
  end
end

return M
