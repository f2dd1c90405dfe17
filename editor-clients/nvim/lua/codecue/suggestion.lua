-- Pure rules about one suggestion: where it sits, what is shown, what accepting a word or a line inserts.
-- No editor state here, so each rule is tested with plain strings (tests/test_nvim_suggestion.py).
--
-- A suggestion is { row, col, text, tail }: `text` is to be inserted at the cursor (row, byte col, 0-based)
-- and replaces `tail`, the text right after the cursor that the server's item range covers.
local M = {}

-- Turn an inlineCompletion item into a suggestion at the cursor, or nil when it does not fit there.
-- `range` is in byte columns of `line` ({start_row, start_col, end_row, end_col}); nil means "at the cursor".
function M.from_item(insert_text, range, line, row, col)
  if type(insert_text) ~= "string" or insert_text == "" then
    return nil
  end
  range = range or { row, col, row, col }
  local start_row, start_col, end_row, end_col = range[1], range[2], range[3], range[4]
  -- The server replaces text on the cursor line only; anything else is stale or not ours to show.
  if start_row ~= row or end_row ~= row or start_col > col or end_col < col or end_col > #line then
    return nil
  end
  local typed = line:sub(start_col + 1, col)
  if insert_text:sub(1, #typed) ~= typed then
    return nil
  end
  local text = insert_text:sub(#typed + 1)
  local tail = line:sub(col + 1, end_col)
  if text == "" or text == tail then
    return nil
  end
  return { row = row, col = col, text = text, tail = tail }
end

-- What to draw: the first line inline at the cursor, the other lines below it.
-- When a one-line suggestion ends with the text it replaces, that text is already on screen: draw only the rest.
function M.display(s)
  local lines = vim.split(s.text, "\n", { plain = true })
  if #lines == 1 and s.tail ~= "" and vim.endswith(s.text, s.tail) then
    lines[1] = s.text:sub(1, #s.text - #s.tail)
  end
  return { inline = lines[1], below = { unpack(lines, 2) } }
end

-- The next word of a suggestion: a line break with the next line's indentation, else optional blanks
-- followed by a run of word characters, or of punctuation, or the blanks alone.
function M.next_word(text)
  return text:match("^\n[ \t]*") or text:match("^[ \t]*[%w_]+") or text:match("^[ \t]*[^%w_%s]+")
    or text:match("^[ \t]+") or text:sub(1, 1)
end

-- The rest of the current line of a suggestion, or the line break plus the next line when at its end.
function M.next_line(text)
  return text:match("^[^\n]+") or text:match("^\n[^\n]*")
end

-- The suggestion left after `chunk` (a prefix of s.text) was inserted at the cursor, or nil when nothing is left.
function M.after_insert(s, chunk)
  local rest = s.text:sub(#chunk + 1)
  local lines = vim.split(chunk, "\n", { plain = true })
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  if rest == "" or rest == s.tail then
    return nil
  end
  return { row = row, col = col, text = rest, tail = s.tail }
end

-- The suggestion after the user typed `typed` at the cursor: it survives when the text starts with it.
function M.after_typing(s, typed)
  if typed == "" or s.text:sub(1, #typed) ~= typed then
    return nil
  end
  return M.after_insert(s, typed)
end

return M
