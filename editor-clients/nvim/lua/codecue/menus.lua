-- Completion menus. nvim-cmp's and blink.cmp's menus are floating windows, so pumvisible() is 0 while they show:
-- their own "visible" functions say whether one is open, and their open events let the ghost text hide at once.
local M = {}

local function call(module, name)
  local plugin = package.loaded[module]
  local fn = type(plugin) == "table" and plugin[name]
  if type(fn) ~= "function" then
    return false
  end
  local ok, visible = pcall(fn)
  return ok and visible == true
end

-- Whether a completion menu is open: Neovim's popup menu, nvim-cmp's or blink.cmp's (when they are loaded).
function M.visible()
  return vim.fn.pumvisible() == 1 or call("cmp", "visible") or call("blink.cmp", "is_menu_visible")
end

local on_open_callbacks = {}
local cmp_hooked = false

-- nvim-cmp announces its menu through its own event emitter, available once it is loaded (often lazily).
local function hook_cmp()
  local cmp = package.loaded["cmp"]
  if cmp_hooked or type(cmp) ~= "table" or type(cmp.event) ~= "table" then
    return
  end
  cmp_hooked = true
  cmp.event:on("menu_opened", function()
    vim.schedule(M.opened)
  end)
end

function M.opened()
  for _, fn in pairs(on_open_callbacks) do
    fn(vim.api.nvim_get_current_buf())
  end
end

-- Calls on_open(bufnr) when a menu opens. `key` names the caller (a second call replaces its callback).
function M.watch(key, on_open)
  on_open_callbacks[key] = on_open
  hook_cmp()
  local group = vim.api.nvim_create_augroup("codecue.menus", { clear = true })
  vim.api.nvim_create_autocmd("User", { group = group, pattern = "BlinkCmpMenuOpen", callback = M.opened })
  vim.api.nvim_create_autocmd({ "InsertEnter", "User" }, { group = group, callback = hook_cmp })
end

return M
