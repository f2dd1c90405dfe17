-- CodeCue's insert-mode keys. They are buffer-local. When CodeCue has nothing to do, or a completion menu is open,
-- the key does what it did before, as blink.cmp's and nvim-cmp's "fallback" do: the buffer-local mapping CodeCue
-- replaced, else the global one (looked up at each press: nvim-cmp, luasnip and Neovim's own snippet <Tab> may map
-- it after CodeCue attached), else a snippet jump for <Tab>, else the plain key.
local menus = require("codecue.menus")

local M = {}

-- keymaps.<name> -> its description; require("codecue.api").<name>() is the action.
M.actions = { accept = "CodeCue: accept suggestion", accept_word = "CodeCue: accept next word",
  accept_line = "CodeCue: accept next line", dismiss = "CodeCue: dismiss suggestion",
  next = "CodeCue: next suggestion", prev = "CodeCue: previous suggestion" }

local function is_ours(m)
  return type(m.desc) == "string" and vim.startswith(m.desc, "CodeCue:")
end

local function global_mapping(lhs)
  local key = vim.keycode(lhs)
  for _, m in ipairs(vim.api.nvim_get_keymap("i")) do
    if vim.keycode(m.lhs) == key and not is_ours(m) then
      return m
    end
  end
end

local function plug(name)
  return "<Plug>(codecue-fallback-" .. name .. ")"
end

-- True from feeding a replayed mapping until its keys have run (DONE is fed right after them).
local replaying = false
local DONE = "<Plug>(codecue-fallback-done)"
vim.keymap.set({ "i", "s", "x", "n", "c", "t" }, DONE, function() -- any mode: the replay may leave Insert mode
  replaying = false
end, { desc = "CodeCue: end of a replayed mapping" })

local function fall_through(st, name, lhs)
  local m = not replaying and (st.replaced[name] or global_mapping(lhs))
  if m then
    -- The mapping is copied to a <Plug> key with all it had (expr, Lua callback, remap, the script context of
    -- a Vimscript rhs) and that key is fed with remapping: the mapping runs as if its own key had been pressed.
    local copy = vim.deepcopy(m)
    copy.lhs, copy.lhsraw, copy.lhsrawalt, copy.buffer, copy.mode = plug(name), vim.keycode(plug(name)), nil, 1, "i"
    vim.fn.mapset(copy)
    replaying = true
    vim.schedule(function() -- the same once Neovim waits for input, should DONE never run (an error flushed it)
      replaying = false
    end)
    vim.api.nvim_feedkeys(vim.keycode(plug(name) .. DONE), "im", false)
  elseif not replaying and vim.keycode(lhs) == vim.keycode("<Tab>") and vim.snippet.active({ direction = 1 }) then
    vim.snippet.jump(1)
  else
    -- Also when the replayed mapping sent its own key again (`imap <expr> <Tab> ... "\<Tab>"` remaps): the
    -- plain key, as Vim does when a mapping's keys start with its own lhs.
    vim.api.nvim_feedkeys(vim.keycode(lhs), "in", false)
  end
end

local function buffer_mapping(bufnr, lhs)
  return vim.api.nvim_buf_call(bufnr, function()
    return vim.fn.maparg(lhs, "i", false, true)
  end)
end

-- Maps keymaps.<name> in the buffer; `st` keeps what it replaced (st.replaced) and what it mapped (st.keys).
-- `action` returns true when it did something; default require("codecue.api")[name].
function M.map(bufnr, st, name, lhs, action)
  if not lhs or lhs == "" then
    return -- false / "": no mapping; require("codecue.api") offers the same actions for keys mapped elsewhere
  end
  local before = buffer_mapping(bufnr, lhs)
  if before.buffer == 1 and not is_ours(before) then
    st.replaced[name] = before
  end
  st.keys[name] = lhs
  vim.keymap.set("i", lhs, function()
    -- With a completion menu open the key belongs to the menu (or to the mapping that drives it).
    if menus.visible() or not (action or require("codecue.api")[name])() then
      fall_through(st, name, lhs)
    end
  end, { buffer = bufnr, desc = M.actions[name] })
end

-- Removes CodeCue's mappings and puts back what they replaced. A key another plugin mapped since (nvim-cmp and
-- blink.cmp map theirs on InsertEnter, keeping CodeCue's as their fallback) is theirs now: left as it is.
function M.unmap(bufnr, st)
  vim.api.nvim_buf_call(bufnr, function()
    for name, lhs in pairs(st.keys) do
      local now = buffer_mapping(bufnr, lhs)
      if now.buffer == 1 and now.desc == M.actions[name] then
        vim.keymap.del("i", lhs, { buffer = bufnr })
        if st.replaced[name] then
          vim.fn.mapset(st.replaced[name]) -- what the user (or another plugin) had there before CodeCue
        end
      end
      pcall(vim.keymap.del, "i", plug(name), { buffer = bufnr })
    end
  end)
end

return M
