"""Start a retrain run, wait for it and list the pipeline's recent runs,
with Python's standard library only (no Temporal SDK): the Temporal HTTP
API that `retrain dev` serves on port 7243 (a cluster's frontend serves
it too, on its HTTP port).

    python3 examples/http/start_run.py PIPELINE [PARAM=VALUE ...]

RETRAIN_HTTP_API overrides the server (default http://127.0.0.1:7243)."""
import json
import os
import sys
import time
import urllib.parse
import urllib.request

API = os.environ.get("RETRAIN_HTTP_API", "http://127.0.0.1:7243") + "/api/v1/namespaces/default"


def call(method, path, body=None):
    req = urllib.request.Request(API + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        return json.load(resp)


pipeline = sys.argv[1]
params = dict(arg.split("=", 1) for arg in sys.argv[2:])
run_id = f"{pipeline}-http-{time.strftime('%Y%m%d-%H%M%S')}"
run = "/workflows/" + urllib.parse.quote(run_id, safe="")

# One run is one Pipeline workflow on the retrain task queue (docs/runs.md).
call("POST", run, {
    "workflowType": {"name": "Pipeline"},
    "taskQueue": {"name": "retrain"},
    "input": [{"pipeline": pipeline, "params": params}],
})

while True:  # wait for the run to close
    info = call("GET", run)["workflowExecutionInfo"]
    if info["status"] != "WORKFLOW_EXECUTION_STATUS_RUNNING":
        break
    time.sleep(1)
print(run_id, info["status"])

# The run's result (its status, nodes and their outputs) is in the
# history's last event; the HTTP API gives JSON payloads as JSON.
last = call("GET", run + "/history")["history"]["events"][-1]
done = last.get("workflowExecutionCompletedEventAttributes")
if done:
    for node in done["result"][0]["nodes"]:
        print(f"  {node['id']:10} {node['status']:10} {node.get('outputs', {}).get('summary', '')}")

# The pipeline's ten latest runs, by the search attribute every run sets.
query = urllib.parse.urlencode({"query": f"RetrainPipeline = '{pipeline}'", "pageSize": 10})
for ex in call("GET", "/workflows?" + query).get("executions", []):
    print(ex["execution"]["workflowId"], ex["status"], ex["startTime"])
