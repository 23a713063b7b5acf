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

import data.gateway.authz.lib

module := "tenancy"

foreign := "the request refers to data outside the caller's tenant"

unavailable := "the requested resource is not available to the caller's tenant"

tenant_args := lib.string_list(lib.setting("tenant_args", []))

resource_args := lib.setting("resource_args", {}) if {
	is_object(lib.setting("resource_args", {}))
} else := {}

# resource_kind(kind) holds when data.gateway.config.resources configures kind.
resource_kind(kind) if is_object(lib.resources[kind])

# owner_of(kind, id) is the tenant that owns the resource.
owner_of(kind, id) := owner if {
	owner := lib.resources[kind][id]
	is_string(owner)
}

# The tool needs a caller tenant to be checked.
tenant_scoped if count(tenant_args) > 0

tenant_scoped if count(resource_args) > 0

tenant_scoped if {
	lib.tool.kind == "filesystem"
	some root in lib.string_list(lib.setting("roots", []))
	contains(root, "{tenant}")
}

deny contains lib.denial(module, "a caller tenant is required for this tool", "the tool is tenant-scoped but the caller has no known tenant") if {
	tenant_scoped
	not lib.tenant
}

deny contains lib.denial(module, "a required argument is missing", sprintf("tenant argument \"%s\" is missing", [name])) if {
	some name in tenant_args
	lib.missing(name)
}

deny contains lib.denial(module, foreign, sprintf("tenant argument \"%s\" is not a string", [name])) if {
	some name in tenant_args
	not lib.missing(name)
	not lib.arg_is_string(name)
}

deny contains lib.denial(module, foreign, reason) if {
	some name in tenant_args
	value := lib.arguments[name]
	is_string(value)
	value != lib.tenant
	reason := sprintf("tenant argument \"%s\" names tenant \"%s\", caller tenant is \"%s\"", [name, value, lib.tenant])
}

deny contains lib.denial(module, lib.misconfigured, "setting resource_args is not an object of argument -> resource kind") if {
	not is_object(lib.setting("resource_args", {}))
}

deny contains lib.denial(module, lib.misconfigured, sprintf("resource kind for argument \"%s\" is not a configured resource kind", [name])) if {
	some name, kind in resource_args
	not resource_kind(kind)
}

deny contains lib.denial(module, "a required argument is missing", sprintf("resource argument \"%s\" is missing", [name])) if {
	some name, _ in resource_args
	lib.missing(name)
}

deny contains lib.denial(module, unavailable, sprintf("resource argument \"%s\" is not a string", [name])) if {
	some name, _ in resource_args
	not lib.missing(name)
	not lib.arg_is_string(name)
}

deny contains lib.denial(module, unavailable, reason) if {
	some name, kind in resource_args
	value := lib.arguments[name]
	is_string(value)
	resource_kind(kind)
	not owner_of(kind, value)
	reason := sprintf("resource argument \"%s\" names an unknown %s resource", [name, kind])
}

deny contains lib.denial(module, unavailable, reason) if {
	some name, kind in resource_args
	value := lib.arguments[name]
	is_string(value)
	owner := owner_of(kind, value)
	owner != lib.tenant
	reason := sprintf("resource argument \"%s\" names a %s resource owned by tenant \"%s\", caller tenant is \"%s\"", [name, kind, owner, lib.tenant])
}
