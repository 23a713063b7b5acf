# A policy for the service tests: the argument "mode" picks the obligation of the decision.
package gateway.authz

clamp := {"type": "rewrite_arguments", "operations": [{"op": "clamp", "path": "/limit", "max": 10}]}

redact := {"type": "redact_output", "pointers": ["/rows/*/ssn"]}

audit := {"type": "audit", "fields": {"ticket": "T-42"}}

approval := {"type": "require_approval", "role": "treasurer", "message": "a treasurer must approve this"}

approved if "treasurer" in input.context.approval.approver_roles

obligations := [clamp] if input.arguments.mode == "clamp"

else := [redact] if input.arguments.mode == "redact"

else := [audit] if input.arguments.mode == "audit"

else := [{"type": "x-notify-the-board"}] if input.arguments.mode == "unknown"

else := "not a list" if input.arguments.mode == "malformed"

else := [] if {
	input.arguments.mode == "approve"
	approved
} else := [approval] if input.arguments.mode == "approve"

else := []

default decision := {"allow": false, "message": "no"}

decision := {"allow": true, "message": "ok", "obligations": obligations} if input.context.subject
