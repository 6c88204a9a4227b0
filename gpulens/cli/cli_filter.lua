--[[
gpulens pre-submission check for sbatch (docs/slurm.md).

Install on every login node, next to slurm.conf:
    gpulens slurm cli-filter > /etc/slurm/cli_filter.lua
and in slurm.conf:
    CliFilterPlugins=cli_filter/lua

For every sbatch it runs `python -m gpulens.validator.sbatch` (what `gpulens slurm check`
does) on the batch script: the validator's static
checks of the script's Python entry point (syntax of its import closure, imports, the
`#GPULENS input` / `#GPULENS output-dir` directives, the input blacklist). A job that would
fail at once is refused with the validator's one line and fix hint; everything else, and any
error of the check itself, lets the job through. GPULENS_SKIP_VALIDATE=1 skips the check.
]]

local CHECK = "@CHECK@"

local function quote(s)
  return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

function slurm_cli_setup_defaults(options, early_pass)
  return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
  if options.type ~= "sbatch" or offset > 0 or os.getenv("GPULENS_SKIP_VALIDATE") == "1" then
    return slurm.SUCCESS
  end
  local cmd = CHECK
  if options.chdir ~= nil then
    cmd = cmd .. " --workdir " .. quote(options.chdir)
  end
  local argv = options.argv
  if options.wrap ~= nil then
    cmd = cmd .. " --wrap " .. quote(options.wrap)
  elseif argv ~= nil and argv[1] ~= nil then
    cmd = cmd .. " --"
    for _, a in ipairs(argv) do
      cmd = cmd .. " " .. quote(a)
    end
  else
    return slurm.SUCCESS -- a script on stdin: nothing to check
  end
  local f = io.popen(cmd .. " 2>/dev/null", "r")
  if f == nil then
    return slurm.SUCCESS
  end
  local out = f:read("*a") or ""
  f:close()
  local line = string.match(out, "gpulens: job rejected: ([^\n]*)")
  if line ~= nil then
    slurm.log_error("gpulens: job rejected: %s", line)
    slurm.log_error("gpulens: fix it, or submit unchecked with GPULENS_SKIP_VALIDATE=1")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
  return slurm.SUCCESS
end
