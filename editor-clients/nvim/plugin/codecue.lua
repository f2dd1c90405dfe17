-- Commands and the highlight group only: nothing starts until require("codecue").setup() is called, and every
-- command is safe before that.
if vim.g.loaded_codecue then
  return
end
vim.g.loaded_codecue = true

-- default = true: a colourscheme or the user's own :highlight wins; re-linked after a colourscheme clears it.
local function define_highlight()
  vim.api.nvim_set_hl(0, "CodeCueSuggestion", { link = "Comment", default = true })
end
define_highlight()
vim.api.nvim_create_autocmd("ColorScheme", {
  group = vim.api.nvim_create_augroup("codecue.highlight", { clear = true }),
  callback = define_highlight,
})

local function command(name, fn, opts)
  vim.api.nvim_create_user_command(name, fn, vim.tbl_extend("force", { desc = "CodeCue" }, opts or {}))
end

command("CodeCueStatus", function()
  vim.notify(table.concat(require("codecue").status_lines(), "\n"))
end, { desc = "CodeCue: server state, latency and counters" })

command("CodeCueToggle", function(args)
  require("codecue").toggle(args.args)
end, {
  nargs = "?",
  complete = function()
    return { "buffer", "filetype" }
  end,
  desc = "CodeCue: turn suggestions on or off (everywhere, in this buffer, for this filetype)",
})

command("CodeCueTrigger", function()
  require("codecue").trigger()
end, { desc = "CodeCue: suggest at the cursor now" })

command("CodeCueRestart", function()
  require("codecue").restart()
end, { desc = "CodeCue: stop the server and start a fresh one for the open buffers" })
