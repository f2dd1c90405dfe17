-- Neovim >= 0.12: vim.lsp.inline_completion draws and accepts the suggestions; this adds the accept key (falling
-- back as the 0.11 path's keys do, keys.lua) and the accept notification. Written against the 0.12
-- documentation; NOT tested in 0.12 (no 0.12 build is installable here: PyPI has 0.11.4, apt 0.7.2), hence off
-- by default (config.native = false).
local telemetry = require("codecue.telemetry")
local keys = require("codecue.keys")

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

local buffers = {} -- bufnr -> { keys, replaced } as keys.lua keeps them

-- Accepts the suggestion Neovim shows, if any; reports what it inserted once Neovim has applied it.
local function accept(bufnr, client)
  local before = cursor()
  if not vim.lsp.inline_completion.get() then
    return false
  end
  vim.schedule(function()
    local text = text_between(bufnr, before, cursor())
    local shown = { id = telemetry.new_id(), length = telemetry.length(text) }
    local position = telemetry.position(bufnr, before[1], before[2], client.offset_encoding)
    telemetry.accepted(client, bufnr, shown, text, position)
  end)
  return true
end

function M.attach(bufnr, client, config)
  M.enable(true, bufnr, client.id)
  if buffers[bufnr] then
    keys.unmap(bufnr, buffers[bufnr])
  end
  local st = { keys = {}, replaced = {} }
  buffers[bufnr] = st
  keys.map(bufnr, st, "accept", config.keymaps.accept, function()
    return accept(bufnr, client)
  end)
end

function M.detach(bufnr, client_id)
  pcall(M.enable, false, bufnr, client_id)
  local st = buffers[bufnr]
  buffers[bufnr] = nil
  if st and vim.api.nvim_buf_is_valid(bufnr) then
    keys.unmap(bufnr, st)
  end
end

return M
