# METADATA
# title: Filesystem path confinement
# description: |
#   For tools of kind "filesystem", every argument listed in "path_args" must
#   be an absolute, canonical POSIX path inside one of the "roots" ("{tenant}"
#   in a root is replaced by the caller's tenant). Paths are never decoded or
#   normalised: anything that a later layer might decode or normalise into a
#   different path is refused outright. Where the gateway sees the tool's
#   filesystem (a PathView), input.facts says where each path really leads,
#   every symbolic link followed; that resolved path must be inside the roots
#   too, and a path the gateway could not resolve is refused. A tool with
#   "require_resolved": true is refused when the gateway sends no such facts.
package gateway.authz.paths

import data.gateway.authz.lib.arg_is_string
import data.gateway.authz.lib.argument_facts
import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.deny_all
import data.gateway.authz.lib.gate_error
import data.gateway.authz.lib.has_control
import data.gateway.authz.lib.has_non_ascii
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.pointer
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tenant
import data.gateway.authz.lib.tool

module := "paths"

applies if tool.kind == "filesystem"

path_args := string_list(setting("path_args", []))

max_length := setting("max_length", 4096)

allow_non_ascii := setting("allow_non_ascii", false)

require_resolved := setting("require_resolved", false)

# The string members of the "roots" setting.
root_settings := string_list(setting("roots", []))

# For the policy gate (gate.rego): the settings that name arguments, and the roots.
gate_settings := {"path_args": {"names": "list", "types": ["string"], "required": true}}

gate_problems contains gate_error(concat("", ["setting roots holds no absolute directory: ", deny_all])) if {
	applies
	not absolute_root
}

absolute_root if {
	some root in root_settings
	startswith(root, "/")
}

# Characters that render like path syntax ("/", ".", "\") or are invisible.
# Refused even when allow_non_ascii is true.
lookalikes := `[\x{0338}\x{2024}\x{2025}\x{2026}\x{2044}\x{2215}\x{2216}\x{29F5}\x{29F8}\x{29F9}\x{3002}\x{FE52}\x{FE68}\x{FF0E}\x{FF0F}\x{FF3C}\x{FF61}\x{00AD}\x{200B}-\x{200F}\x{202A}-\x{202E}\x{2060}-\x{2064}\x{FEFF}]`

# The string-valued path arguments, by argument name.
values[name] := p if {
	applies
	some name in path_args
	p := arguments[name]
	is_string(p)
}

# The names of path arguments in a plainly harmless form: absolute, non-empty
# segments of [A-Za-z0-9._-] that do not start with '.', an optional trailing '/'.
# Such a path passes every check below except, possibly, the length and root checks,
# so the other checks look only at the remaining paths (one regex for the common case).
plain contains name if {
	some name, p in values
	regex.match(`^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+/?$`, p)
}

# The string-valued path arguments that are not plain, by argument name.
unusual[name] := p if {
	some name, p in values
	not plain[name]
}

# The configured roots that are absolute, with "{tenant}" replaced by the caller's tenant.
roots contains root if {
	some root in root_settings
	startswith(root, "/")
	not contains(root, "{tenant}")
}

roots contains replace(root, "{tenant}", tenant) if {
	some root in root_settings
	startswith(root, "/")
	contains(root, "{tenant}")
}

# The roots without their trailing '/'.
root_dirs contains trim_suffix(root, "/") if some root in roots

# inside_roots(p) holds when p is a root itself or below one.
inside_roots(p) if p in root_dirs

inside_roots(p) if {
	some dir in root_dirs
	startswith(p, concat("", [dir, "/"]))
}

# Where the gateway resolved each string-valued path argument (input.facts), by name.
resolution[name] := r if {
	some name, _ in values
	r := argument_facts[pointer(name)].path
}

# resolution_error(r) is the gateway's reason for not resolving, as text for the audit.
resolution_error(r) := r.error if {
	is_string(r.error)
} else := "no result"

# resolved_path(r) is the resolved path of a resolution, when it has one.
resolved_path(r) := r.resolved if is_string(r.resolved)

deny contains denial(module, "path is not allowed: it cannot be resolved", sprintf("path argument \"%s\" was not resolved by the gateway (%s)", [name, resolution_error(r)])) if {
	some name, r in resolution
	not resolved_path(r)
}

deny contains denial(module, "path is not allowed: it leads outside the allowed directories", sprintf("path argument \"%s\" resolves, through a symbolic link, outside every allowed root", [name])) if {
	some name, r in resolution
	p := resolved_path(r)
	not inside_roots(p)
}

deny contains denial(module, misconfigured, sprintf("path argument \"%s\" has no resolved-path facts, which the tool requires", [name])) if {
	require_resolved == true
	some name, _ in values
	not resolution[name]
}

deny contains denial(module, misconfigured, "filesystem tool has no path_args") if {
	applies
	count(path_args) == 0
}

deny contains denial(module, misconfigured, "filesystem tool has no usable roots") if {
	applies
	count(root_settings) == 0
}

deny contains denial(module, "a required argument is missing", sprintf("path argument \"%s\" is missing", [name])) if {
	applies
	some name in path_args
	not values[name]
	missing(name)
}

deny contains denial(module, "path is not allowed: it must be a string", sprintf("path argument \"%s\" is not a string", [name])) if {
	applies
	some name in path_args
	not values[name]
	not missing(name)
	not arg_is_string(name)
}

deny contains denial(module, "path is not allowed: it is too long", sprintf("path argument \"%s\" is longer than %d characters", [name, max_length])) if {
	is_number(max_length)
	some name, p in values
	count(p) > max_length
}

deny contains denial(module, "path is not allowed: it is outside the allowed directories", sprintf("path argument \"%s\" is not inside any allowed root", [name])) if {
	some name, p in values
	startswith(p, "/")
	not inside_roots(p)
}

# The checks below can fail only for a path that is not plain, so they are evaluated
# only when there is one.
deny contains d if {
	count(unusual) > 0
	some d in unusual_denials
}

unusual_denials contains denial(module, "path is not allowed: it is empty", sprintf("path argument \"%s\" is empty", [name])) if {
	some name, p in unusual
	p == ""
}

unusual_denials contains denial(module, "path is not allowed: it contains control characters", sprintf("path argument \"%s\" contains a control character (NUL, newline, ...)", [name])) if {
	some name, p in unusual
	has_control(p)
}

unusual_denials contains denial(module, "path is not allowed: backslashes are not allowed", sprintf("path argument \"%s\" contains a backslash", [name])) if {
	some name, p in unusual
	contains(p, `\`)
}

unusual_denials contains denial(module, "path is not allowed: percent-encoding is not allowed", sprintf("path argument \"%s\" contains '%%' (percent-encoding such as %%2e or %%2f)", [name])) if {
	some name, p in unusual
	contains(p, "%")
}

unusual_denials contains denial(module, "path is not allowed: non-ASCII characters are not allowed", sprintf("path argument \"%s\" contains non-ASCII characters", [name])) if {
	allow_non_ascii != true
	some name, p in unusual
	has_non_ascii(p)
}

unusual_denials contains denial(module, "path is not allowed: it contains look-alike or invisible characters", sprintf("path argument \"%s\" contains a Unicode look-alike of '/', '.' or '\\', or an invisible character", [name])) if {
	some name, p in unusual
	regex.match(lookalikes, p)
}

unusual_denials contains denial(module, "path is not allowed: it must be absolute", sprintf("path argument \"%s\" is relative", [name])) if {
	some name, p in unusual
	p != ""
	not startswith(p, "/")
}

unusual_denials contains denial(module, "path is not allowed: doubled slashes are not allowed", sprintf("path argument \"%s\" contains '//'", [name])) if {
	some name, p in unusual
	contains(p, "//")
}

unusual_denials contains denial(module, "path is not allowed: '.' and '..' segments are not allowed", sprintf("path argument \"%s\" contains a '%s' segment (traversal)", [name, segment])) if {
	some name, p in unusual
	some segment in split(p, "/")
	segment in {".", ".."}
}
