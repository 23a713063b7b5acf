# Shared fixtures for the policy tests (no tests of its own).
package gateway.authz.fixtures_test

import data.gateway.authz

# context(roles, tenant) is a caller context with a subject.
context(roles, tenant) := {
	"subject": "alice@example.com",
	"roles": roles,
	"tenant": tenant,
	"session": "sess-1",
	"request_id": "req-1",
}

# request(tool, args, ctx) is an input document (policy contract version 1).
request(tool, args, ctx) := {
	"tool": {"name": tool, "description": "test tool", "input_schema": {"type": "object"}},
	"arguments": args,
	"context": ctx,
}

# decide(tool, args, ctx) is the decision for the call.
decide(tool, args, ctx) := d if {
	d := authz.decision with input as request(tool, args, ctx)
}

# Decision for a caller with one role in tenant acme.
as_role(role, tool, args) := decide(tool, args, context([role], "acme"))

# has_reason(d, fragment) holds when d is a denial with a reason containing fragment.
has_reason(d, fragment) if {
	d.allow == false
	some r in d.reasons
	contains(r, fragment)
}

# has_message(d, fragment) holds when d is a denial whose public message contains fragment.
has_message(d, fragment) if {
	d.allow == false
	contains(d.message, fragment)
}

# allowed(d) holds when d allows the call with the success message.
allowed(d) if {
	d.allow == true
	d.message == "the call is authorized"
}
