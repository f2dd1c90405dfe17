-- CodeCue's public API, for keys you map yourself: set `keymaps.accept = false` (or any other key to false) and
-- call these from your own mapping, nvim-cmp or blink.cmp. Each returns true when it did something, so one key
-- can try CodeCue first and then do what it did before. They act on the plugin's ghost text (native = false).
--
--   blink.cmp:  keymap = { ["<Tab>"] = { "select_next", function() return require("codecue.api").accept() end,
--                                        "snippet_forward", "fallback" } }
--   nvim-cmp:   ["<Tab>"] = cmp.mapping(function(fallback)
--                 if cmp.visible() then cmp.select_next_item()
--                 elseif not require("codecue.api").accept() then fallback() end
--               end, { "i", "s" })
--
-- Safe from expr mappings too (textlock): the text is then inserted right after the mapping returns.
local fallback = require("codecue.fallback")

local M = {}

-- Whether a suggestion is shown at the cursor and still fits the buffer there.
function M.is_visible()
  return fallback.visible()
end

-- Insert the whole suggestion.
function M.accept()
  return fallback.accept("all")
end

-- Insert the suggestion's next word; the rest stays shown.
function M.accept_word()
  return fallback.accept("word")
end

-- Insert the rest of the suggestion's current line (or the next line when at its end); the rest stays shown.
function M.accept_line()
  return fallback.accept("line")
end

-- Show the next suggestion (asking the server for alternatives when only one is at hand).
function M.next()
  return fallback.cycle(1)
end

-- Show the previous suggestion.
function M.prev()
  return fallback.cycle(-1)
end

-- Hide the suggestion and cancel the request in flight.
function M.dismiss()
  return fallback.dismiss()
end

return M
