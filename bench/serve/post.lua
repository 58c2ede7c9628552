-- SPDX-License-Identifier: Apache-2.0
-- wrk script: POST the JSON body in $BODY_FILE to /v1/infer.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open(os.getenv("BODY_FILE"), "r"))
wrk.body = f:read("*a")
f:close()
wrk.path = "/v1/infer"
