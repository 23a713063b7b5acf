# The candidate policy of the console demo's shadow evaluation: it also refuses lookups of ACME-9.
package gateway.authz

approval := {"type": "require_approval", "role": "treasurer", "message": "a treasurer must approve every payment"}

approved if "treasurer" in input.context.approval.approver_roles

obligations := [] if {
	input.tool.name == "pay"
	approved
} else := [approval] if input.tool.name == "pay"

else := []

default decision := {"allow": false, "message": "no", "reasons": ["no subject"]}

decision := {"allow": true, "message": "ok", "reasons": ["payments over 0 need approval"], "obligations": obligations} if {
	input.context.subject
	input.tool.name == "pay"
}

decision := {"allow": false, "message": "refused", "reasons": ["lookups are not allowed on closed accounts"]} if {
	input.context.subject
	input.tool.name == "lookup"
	input.arguments.account in {"closed", "ACME-9"}
}

decision := {"allow": true, "message": "ok", "reasons": []} if {
	input.context.subject
	input.tool.name == "lookup"
	not input.arguments.account in {"closed", "ACME-9"}
}
