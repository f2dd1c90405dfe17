-- Commands only: nothing starts until require("codecue").setup() is called.
if vim.g.loaded_codecue then
  return
end
vim.g.loaded_codecue = true

vim.api.nvim_create_user_command("CodeCueStatus", function()
  vim.notify(table.concat(require("codecue").status_lines(), "\n"))
end, { desc = "CodeCue: server state, latency and counters" })

vim.api.nvim_create_user_command("CodeCueToggle", function()
  require("codecue").toggle()
end, { desc = "CodeCue: turn suggestions on or off" })
