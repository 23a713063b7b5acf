# The AuthZEN Authorization API 1.0 certification scenario's fixture policy (its section
# "Required Policy Behaviour"), written for the gateway's mapping: the action is the tool
# (read, write, delete), the resource and the action's properties are its arguments, and a
# trusted PEP's subject (its id and properties) is the caller context.
package authzen_fixture

import rego.v1

default decision := {"allow": false, "message": "the fixture does not permit this"}

decision := {"allow": true} if allowed

subject := input.context.subject

resource := input.arguments.resource

archived if resource.properties.status == "archived"

admin if input.context.role == "admin"

known_subject if subject in {"alice", "bob"}

# Rules 1 and 3: alice and bob read record-1.
allowed if {
	input.tool.name == "read"
	known_subject
	resource.type == "record"
}

# Rules 2 and 5: alice writes records that are not archived.
allowed if {
	input.tool.name == "write"
	subject == "alice"
	resource.type == "record"
	not archived
}

# Rule 6: an admin writes even archived records.
allowed if {
	input.tool.name == "write"
	admin
	resource.type == "record"
}

# Rules 7 and 8: alice soft-deletes, never hard-deletes.
allowed if {
	input.tool.name == "delete"
	subject == "alice"
	resource.type == "record"
	input.arguments.action.soft == true
}
