-- Ghost text with extmarks: the first line inline at the cursor, further lines as virtual lines below.
local suggestion = require("codecue.suggestion")

local M = {}

M.ns = vim.api.nvim_create_namespace("codecue.ghost")
-- "2/3" at the end of the line while several suggestions can be cycled through.
M.counter_ns = vim.api.nvim_create_namespace("codecue.ghost.counter")

local function expand_tabs(text, bufnr)
  return (text:gsub("\t", string.rep(" ", vim.bo[bufnr].tabstop)))
end

function M.show(bufnr, s, hl_group, counter)
  M.clear(bufnr)
  if counter then
    vim.api.nvim_buf_set_extmark(bufnr, M.counter_ns, s.row, 0,
      { virt_text = { { " " .. counter, hl_group } }, virt_text_pos = "eol", priority = 200 })
  end
  local shown = suggestion.display(s)
  local opts = { virt_text_pos = "inline", hl_mode = "combine", priority = 200 }
  if shown.inline ~= "" then
    opts.virt_text = { { expand_tabs(shown.inline, bufnr), hl_group } }
  end
  if #shown.below > 0 then
    opts.virt_lines = vim.tbl_map(function(line)
      return { { expand_tabs(line, bufnr), hl_group } }
    end, shown.below)
  end
  return vim.api.nvim_buf_set_extmark(bufnr, M.ns, s.row, s.col, opts)
end

function M.clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
    vim.api.nvim_buf_clear_namespace(bufnr, M.counter_ns, 0, -1)
  end
end

-- The ghost text currently drawn in a buffer, as the user sees it (for tests and :CodeCueStatus).
function M.read(bufnr)
  local marks = vim.api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local _, row, col, details = unpack(marks[1])
  local function join(chunks)
    return table.concat(vim.tbl_map(function(c) return c[1] end, chunks or {}))
  end
  local lines = { join(details.virt_text) }
  for _, chunks in ipairs(details.virt_lines or {}) do
    table.insert(lines, join(chunks))
  end
  return { row = row, col = col, text = table.concat(lines, "\n") }
end

-- The "n/m" counter drawn with the ghost text, or nil.
function M.read_counter(bufnr)
  local marks = vim.api.nvim_buf_get_extmarks(bufnr, M.counter_ns, 0, -1, { details = true })
  return marks[1] and vim.trim(marks[1][4].virt_text[1][1]) or nil
end

return M
