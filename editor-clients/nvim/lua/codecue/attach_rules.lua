-- Which buffers are never attached, so nothing of them reaches the server: special buffers (help, terminal,
-- nofile), buffers larger than max_file_bytes, secret-looking file names (the names the server's project index
-- never reads, codecue_lsp/context/files.py SECRET_NAMES) and paths matching exclude_globs. The path rules are
-- pure functions of strings (tests/test_nvim_attach_rules.py).
local M = {}

M.SECRET_NAMES = { ".env*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
  "*credentials*", "*secret*", ".netrc", ".npmrc", ".pypirc", ".git-credentials" }

-- Vim's own glob translation: vim.glob.to_lpeg in 0.11 lets a leading or trailing `*` match no empty text.
local function glob_matches(pattern, text)
  return vim.regex(vim.fn.glob2regpat(pattern)):match_str(text) ~= nil
end

-- Whether a file name looks like it holds secrets (case-insensitive, by name alone).
function M.is_secret_name(name)
  name = name:lower()
  for _, pattern in ipairs(M.SECRET_NAMES) do
    if glob_matches(pattern, name) then
      return true
    end
  end
  return false
end

-- Whether `relpath` (relative to the project root, "/" separators) matches one gitignore-style pattern: one
-- without a slash matches any file or folder name at any depth, one with a slash is anchored at the root, a
-- trailing slash matches folders only.
function M.glob_excludes(pattern, relpath)
  local folders_only = vim.endswith(pattern, "/")
  pattern = pattern:gsub("/+$", "")
  local parts = vim.split(relpath, "/", { plain = true })
  if not pattern:find("/") then
    for i, part in ipairs(parts) do
      if glob_matches(pattern, part) and not (folders_only and i == #parts) then
        return true
      end
    end
    return false
  end
  pattern = pattern:gsub("^/", "")
  for i = folders_only and #parts - 1 or #parts, 1, -1 do
    if glob_matches(pattern, table.concat(parts, "/", 1, i)) then
      return true -- the path itself, or a folder above it
    end
  end
  return false
end

function M.path_excluded(relpath, globs)
  for _, pattern in ipairs(globs or {}) do
    if M.glob_excludes(pattern, relpath) then
      return true
    end
  end
  return false
end

local function relative(path, root)
  if root and vim.startswith(path, root .. "/") then
    return path:sub(#root + 2)
  end
  return vim.fs.basename(path)
end

-- The default should_attach: `root` is the buffer's project root (nil: none), `cfg` the merged setup options.
function M.default(bufnr, path, root, cfg)
  if vim.bo[bufnr].buftype ~= "" then
    return false
  end
  if vim.api.nvim_buf_get_offset(bufnr, vim.api.nvim_buf_line_count(bufnr)) > cfg.max_file_bytes then
    return false
  end
  if path == "" then
    return true -- an unnamed scratch buffer: nothing on disk, no name to judge
  end
  return not M.is_secret_name(vim.fs.basename(path)) and not M.path_excluded(relative(path, root), cfg.exclude_globs)
end

return M
