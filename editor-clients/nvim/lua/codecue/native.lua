-- Neovim >= 0.12: vim.lsp.inline_completion draws and accepts the suggestions; this adds the keymaps and the
-- accept notification. Written against the 0.12 documentation; NOT tested in 0.12 (only 0.11.4 is available),
-- hence off by default (config.native = false).
local telemetry = require("codecue.telemetry")

local M = {}

local function text_between(bufnr, from, to)
  if to[1] < from[1] or (to[1] == from[1] and to[2] <= from[2]) then
    return ""
  end
  return table.concat(vim.api.nvim_buf_get_text(bufnr, from[1], from[2], to[1], to[2], {}), "\n")
end

local function cursor()
  local pos = vim.api.nvim_win_get_cursor(0)
  return { pos[1] - 1, pos[2] }
end

-- Scoped to CodeCue's client: another server's inline completions in the same buffer are not ours to switch.
function M.enable(on, bufnr, client_id)
  vim.lsp.inline_completion.enable(on, { bufnr = bufnr, client_id = client_id })
end

function M.attach(bufnr, client, config)
  M.enable(true, bufnr, client.id)
  local lhs = config.keymaps.accept
  if not lhs or lhs == "" then
    return
  end
  vim.keymap.set("i", lhs, function()
    local before = cursor()
    if not vim.lsp.inline_completion.get() then
      return lhs
    end
    -- The item is applied by Neovim; report what it inserted once that has happened.
    vim.schedule(function()
      local text = text_between(bufnr, before, cursor())
      telemetry.accepted(client, bufnr, text, telemetry.length(text))
    end)
  end, { buffer = bufnr, expr = true, replace_keycodes = true, desc = "CodeCue: accept suggestion" })
end

function M.detach(bufnr, client_id)
  pcall(M.enable, false, bufnr, client_id)
end

return M
