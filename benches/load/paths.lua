-- wrk script for the stq load benchmark (benches/load.rs runs it).
--
-- Usage: wrk ... -s benches/load/paths.lua http://127.0.0.1:PORT -- PATHS_FILE TOKEN
--
-- Each request goes to a path drawn at random from PATHS_FILE (one path with its
-- query string per line, pre-generated from the data), with
-- `Authorization: Bearer TOKEN`. The requests are formatted once in init(), so
-- request() only picks one: wrk's own cost per request stays as low as it can.
-- When the run ends, done() prints one line `LOAD-RESULT {json}` with the exact
-- counters (wrk's human summary rounds bytes to three digits).

local threads_set_up = 0

-- Runs in the main Lua state, once per thread: give each thread its own number
-- so that the threads draw different sequences of paths.
function setup(thread)
   threads_set_up = threads_set_up + 1
   thread:set("thread_number", threads_set_up)
end

local requests = {}
local request_count = 0

function init(args)
   local paths_file = args[1]
   local token = args[2]
   if paths_file == nil or token == nil then
      error("usage: wrk ... -s paths.lua URL -- PATHS_FILE TOKEN")
   end
   local headers = { ["Authorization"] = "Bearer " .. token }
   for path in io.lines(paths_file) do
      if path ~= "" then
         request_count = request_count + 1
         requests[request_count] = wrk.format("GET", path, headers)
      end
   end
   if request_count == 0 then
      error("no paths in " .. paths_file)
   end
   math.randomseed(7919 * (thread_number or 1))
end

function request()
   return requests[math.random(request_count)]
end

function done(summary, latency, requests)
   local errors = summary.errors
   io.write(string.format(
      'LOAD-RESULT {"requests":%.0f,"bytes":%.0f,"duration_us":%.0f,' ..
      '"latency_p50_us":%.1f,"latency_p99_us":%.1f,"latency_mean_us":%.1f,' ..
      '"latency_max_us":%.1f,"connect_errors":%.0f,"read_errors":%.0f,' ..
      '"write_errors":%.0f,"timeout_errors":%.0f,"non_2xx_or_3xx":%.0f}\n',
      summary.requests, summary.bytes, summary.duration,
      latency:percentile(50), latency:percentile(99), latency.mean,
      latency.max, errors.connect, errors.read,
      errors.write, errors.timeout, errors.status))
end
