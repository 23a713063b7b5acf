# METADATA
# title: Tenant isolation
# description: |
#   An argument that names a tenant (tool setting "tenant_args") must name the
#   caller's own tenant; an argument that names a tenant-owned resource (tool
#   setting "resource_args": argument -> resource kind) must name a resource
#   that data.gateway.config.resources assigns to the caller's tenant.
#   Filesystem roots containing "{tenant}" also make a tool tenant-scoped.
#   Public messages never reveal which tenant owns a resource, or whether it exists.
package gateway.authz.tenancy

import data.gateway.authz.lib.arg_is_string
import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.deny_all
import data.gateway.authz.lib.gate_error
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.resources
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tenant
import data.gateway.authz.lib.tool

module := "tenancy"

foreign := "the request refers to data outside the caller's tenant"

unavailable := "the requested resource is not available to the caller's tenant"

# The module can deny a call only for a tool with a "tenant_args" or "resource_args"
# setting, or for a caller without a tenant calling a filesystem tool (whose roots may
# name the tenant): main.rego evaluates deny only when this holds.
applies if {
	some name in ["tenant_args", "resource_args"]
	object.get(tool, name, null) != null
}

applies if {
	not tenant
	tool.kind == "filesystem"
}

tenant_args := string_list(setting("tenant_args", []))

resource_args_setting := setting("resource_args", {})

resource_args := resource_args_setting if {
	is_object(resource_args_setting)
} else := {}

# resource_kind(kind) holds when data.gateway.config.resources configures kind.
resource_kind(kind) if is_object(resources[kind])

# For the policy gate (gate.rego): the settings that name arguments, and the resource
# kinds resource_args names.
gate_settings := {
	"tenant_args": {"names": "list", "types": ["string"], "required": false},
	"resource_args": {"names": "keys", "value": "resource kind", "types": ["string"], "required": false},
}

gate_problems contains gate_error(concat("", ["setting resource_args maps argument ", json.marshal(name), " to resource kind ", json.marshal(kind), ", which data.gateway.config.resources does not configure: ", deny_all])) if {
	some name, kind in resource_args
	not resource_kind(kind)
}

# owner_of(kind, id) is the tenant that owns the resource.
owner_of(kind, id) := owner if {
	# Two steps: regorus evaluates a reference with two variable keys
	# (resources[kind][id]) about ten times slower.
	owned := resources[kind]
	owner := owned[id]
	is_string(owner)
}

# The string values of the resource arguments, by argument name.
resource_values[name] := value if {
	some name, _ in resource_args
	value := arguments[name]
	is_string(value)
}

# The tool needs a caller tenant to be checked.
tenant_scoped if count(tenant_args) > 0

tenant_scoped if count(resource_args) > 0

tenant_scoped if {
	tool.kind == "filesystem"
	some root in string_list(setting("roots", []))
	contains(root, "{tenant}")
}

deny contains denial(module, "a caller tenant is required for this tool", "the tool is tenant-scoped but the caller has no known tenant") if {
	not tenant
	tenant_scoped
}

deny contains denial(module, "a required argument is missing", sprintf("tenant argument \"%s\" is missing", [name])) if {
	some name in tenant_args
	missing(name)
}

deny contains denial(module, foreign, sprintf("tenant argument \"%s\" is not a string", [name])) if {
	some name in tenant_args
	not arg_is_string(name)
	not missing(name)
}

deny contains denial(module, foreign, reason) if {
	some name in tenant_args
	value := arguments[name]
	is_string(value)
	value != tenant
	reason := sprintf("tenant argument \"%s\" names tenant \"%s\", caller tenant is \"%s\"", [name, value, tenant])
}

deny contains denial(module, misconfigured, "setting resource_args is not an object of argument -> resource kind") if {
	not is_object(resource_args_setting)
}

deny contains denial(module, misconfigured, sprintf("resource kind for argument \"%s\" is not a configured resource kind", [name])) if {
	some name, kind in resource_args
	not resource_kind(kind)
}

deny contains denial(module, "a required argument is missing", sprintf("resource argument \"%s\" is missing", [name])) if {
	some name, _ in resource_args
	not resource_values[name]
	missing(name)
}

deny contains denial(module, unavailable, sprintf("resource argument \"%s\" is not a string", [name])) if {
	some name, _ in resource_args
	not resource_values[name] # not arg_is_string(name)
	not missing(name)
}

deny contains denial(module, unavailable, reason) if {
	some name, kind in resource_args
	value := resource_values[name]
	not owner_of(kind, value)
	resource_kind(kind)
	reason := sprintf("resource argument \"%s\" names an unknown %s resource", [name, kind])
}

deny contains denial(module, unavailable, reason) if {
	some name, kind in resource_args
	value := resource_values[name]
	owner := owner_of(kind, value)
	owner != tenant
	reason := sprintf("resource argument \"%s\" names a %s resource owned by tenant \"%s\", caller tenant is \"%s\"", [name, kind, owner, tenant])
}
