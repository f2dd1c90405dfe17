-- A server that exits without being asked to (a crash, a kill, out of memory) is started again for every buffer
-- it served, after waits that grow (config.restart_delays_ms: 1 s, 2 s, 4 s). After the last try the state
-- stays "crashed" until :CodeCueRestart. Neovim itself does not restart a client, nor attach the buffers again.
local M = {}

-- A server that ran this long before it crashed gets the full number of tries again.
M.STABLE_MS = 60000

-- nil while no crash is unanswered; else { reason, tries, max, waiting_ms, gave_up }.
M.crash = nil
local timer
local tries = 0 -- automatic restarts since the last stable run or :CodeCueRestart
local started_at -- vim.uv.now() of the last automatic restart
local owed = {} -- buffers of a crashed server that no new one has attached yet

-- Whether a client's exit was a crash: a stop that Neovim asked for (:qa, :CodeCueRestart, :lsp stop) is not.
function M.is_crash(code, signal, asked_to_stop)
  return not asked_to_stop and (code ~= 0 or signal ~= 0)
end

function M.reason(code, signal)
  return signal ~= 0 and ("killed by signal " .. signal) or ("exit code " .. code)
end

-- "crashed (exit code 1), restart 2/3 in 2 s" and the like, for the statusline and :CodeCueStatus.
function M.describe()
  local c = M.crash
  if not c then
    return nil
  end
  if c.gave_up and c.max == 0 then
    return ("crashed (%s): :CodeCueRestart"):format(c.reason)
  end
  if c.gave_up then
    return ("crashed (%s), gave up after %d restarts: :CodeCueRestart"):format(c.reason, c.tries)
  end
  if c.waiting_ms then
    return ("crashed (%s), restart %d/%d in %g s"):format(c.reason, c.tries + 1, c.max, c.waiting_ms / 1000)
  end
  return ("crashed (%s), restarting (%d/%d)"):format(c.reason, c.tries, c.max)
end

local function stop_timer()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
end

-- :CodeCueRestart: forget the crash and give automatic restarts their full count again.
function M.reset()
  stop_timer()
  M.crash, tries, owed = nil, 0, {}
end

-- A client attached a buffer again: the restart worked (the try count stays until the server has run a while).
function M.attached()
  if M.crash and not M.crash.gave_up and not M.crash.waiting_ms then
    M.crash, owed = nil, {}
  end
end

local function buffer_list(set)
  local list = {}
  for bufnr in pairs(set) do
    table.insert(list, bufnr)
  end
  table.sort(list)
  return list
end

-- The client's on_exit (lsp_config): `start(buffers)` starts a server for those buffers; `delays` lists the waits
-- before each try. Runs outside the main loop's safe context, so it only reads the client and schedules.
function M.on_exit(code, signal, client_id, start, delays)
  local client = vim.lsp.get_client_by_id(client_id)
  -- Client:stop() sets _is_stopping; Neovim offers no public "was asked to stop" on an exited client.
  local asked = client == nil or client._is_stopping == true
  if not M.is_crash(code, signal, asked) then
    return
  end
  local buffers = vim.deepcopy(client.attached_buffers)
  vim.schedule(function()
    if started_at and vim.uv.now() - started_at > M.STABLE_MS then
      tries = 0
    end
    -- A server that died before attaching anything still owes the buffers of the one before it.
    owed = vim.tbl_extend("force", owed, buffers)
    stop_timer()
    M.crash = { reason = M.reason(code, signal), tries = tries, max = #delays }
    if tries >= #delays then
      M.crash.gave_up = true
      vim.notify("CodeCue: the server " .. M.describe(), vim.log.levels.ERROR)
      return vim.cmd.redrawstatus()
    end
    M.crash.waiting_ms = delays[tries + 1]
    vim.cmd.redrawstatus()
    timer = vim.uv.new_timer()
    timer:start(M.crash.waiting_ms, 0, vim.schedule_wrap(function()
      if not M.crash or not M.crash.waiting_ms then
        return -- :CodeCueRestart came first
      end
      tries = tries + 1
      M.crash.waiting_ms, M.crash.tries = nil, tries
      started_at = vim.uv.now()
      start(buffer_list(owed))
      vim.cmd.redrawstatus()
    end))
  end)
end

return M
