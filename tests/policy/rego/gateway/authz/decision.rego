# Test policy for the engine contract suite (policy contract version 1, Rego v1).
#
# data.gateway.authz.subjects comes from the data.json next to this file.
package gateway.authz

default allow := false

allow if count(denials) == 0

subject_known if input.context.subject in data.gateway.authz.subjects

denials contains "subject: missing from the caller context" if not input.context.subject

denials contains "subject: not on the allow list" if {
	input.context.subject
	not subject_known
}

denials contains "text: the word \"blocked\" is refused" if input.arguments.text == "blocked"

denials contains "tool: unknown" if not input.tool.name in {"echo", "big"}

# 2^53 + 1: a float round-trip would turn it into 2^53, which must be denied.
denials contains "n: not exactly 9007199254740993" if {
	input.tool.name == "big"
	not input.arguments.n == 9007199254740993
}

decision := {"allow": true, "cache": {"ttl_s": 30}} if {
	allow
} else := {
	"allow": false,
	"message": "not authorized: ask an administrator",
	"reasons": denials,
	"cache": {"ttl_s": 30},
}
