-- wrk script for a control experiment: busy work on the load CPU for every response, so that
-- plain proxying sees a load CPU as slow as TLS makes it, without any TLS (bench/together.sh's
-- --a-spin/--b-spin; docs/benchmarks.md, "Simultaneous A/B: bench/together.sh").
-- SPIN (default 1000) is the loop count; on the 2-core bench VM, 1000 iterations cost about
-- 3 us of load-CPU time per request.
--   SPIN=900 taskset -c 0 wrk -t1 -c50 -d5s -s bench/configs/slow-loader.lua http://127.0.0.1:PORT/
local n = tonumber(os.getenv("SPIN") or "1000")

function response(status, headers, body)
  local x = 0
  for i = 1, n do
    x = x + i % 7
  end
  if x < 0 then
    print(x)
  end
end
