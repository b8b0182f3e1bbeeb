"""Hooks for the API contract test: keep what schemathesis generates inside the test daemon.

A sandbox created over the API may bind-mount host paths (see docs/security.md, "Who may use the API"). The
test daemon runs as host root on the test machine, so generated `mounts` are dropped before any request is
sent: whatever else is generated then acts only on the test daemon's own data root and sandboxes.
"""

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    if isinstance(case.body, dict) and case.body.get("mounts"):
        case.body["mounts"] = []
