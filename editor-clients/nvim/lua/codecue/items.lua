-- The items of an inlineCompletion answer as suggestions at the cursor (suggestion.lua), and which to show first.
local suggestion = require("codecue.suggestion")

local M = {}

-- The usable items of a response as suggestions at the cursor, without repeats.
function M.from_response(result, bufnr, cursor, encoding)
  local items = result and (result.items or result) or {}
  local row, col = cursor[1], cursor[2]
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, true)[1]
  local found, seen = {}, {}
  for _, item in ipairs(items) do
    local text = type(item.insertText) == "table" and item.insertText.value or item.insertText
    local range
    if item.range then
      local r = item.range
      local function byte(pos)
        return vim.str_byteindex(line, encoding, math.min(pos.character, vim.str_utfindex(line, encoding)), false)
      end
      range = { r.start.line, byte(r.start), r["end"].line, byte(r["end"]) }
    end
    local s = suggestion.from_item(text, range, line, row, col)
    if s and not seen[s.text] then
      seen[s.text] = true
      table.insert(found, s)
    end
  end
  return found
end

-- Which of `items` to show first: the first, or for a cycling request the one after (before) the suggestion
-- shown now.
function M.first_index(items, now, direction)
  if not direction or not now or #items < 2 then
    return 1
  end
  local at = 1
  for i, s in ipairs(items) do
    if s.text == now.text then
      at = i
    end
  end
  return (at - 1 + direction) % #items + 1
end

return M
