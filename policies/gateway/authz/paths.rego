# METADATA
# title: Filesystem path confinement
# description: |
#   For tools of kind "filesystem", every argument listed in "path_args" must
#   be an absolute, canonical POSIX path inside one of the "roots" ("{tenant}"
#   in a root is replaced by the caller's tenant). Paths are never decoded or
#   normalised: anything that a later layer might decode or normalise into a
#   different path is refused outright.
package gateway.authz.paths

import data.gateway.authz.lib

module := "paths"

applies if lib.tool.kind == "filesystem"

path_args := lib.string_list(lib.setting("path_args", []))

max_length := lib.setting("max_length", 4096)

allow_non_ascii := lib.setting("allow_non_ascii", false)

# Characters that render like path syntax ("/", ".", "\") or are invisible.
# Refused even when allow_non_ascii is true.
lookalikes := `[\x{0338}\x{2024}\x{2025}\x{2026}\x{2044}\x{2215}\x{2216}\x{29F5}\x{29F8}\x{29F9}\x{3002}\x{FE52}\x{FE68}\x{FF0E}\x{FF0F}\x{FF3C}\x{FF61}\x{00AD}\x{200B}-\x{200F}\x{202A}-\x{202E}\x{2060}-\x{2064}\x{FEFF}]`

# The string-valued path arguments, by argument name.
values[name] := p if {
	applies
	some name in path_args
	p := lib.arguments[name]
	is_string(p)
}

# The configured roots that are absolute, with "{tenant}" replaced by the caller's tenant.
roots contains root if {
	some root in lib.string_list(lib.setting("roots", []))
	startswith(root, "/")
	not contains(root, "{tenant}")
}

roots contains replace(root, "{tenant}", lib.tenant) if {
	some root in lib.string_list(lib.setting("roots", []))
	startswith(root, "/")
	contains(root, "{tenant}")
}

# within(p, root) holds when p is root itself or below it.
within(p, root) if p == trim_suffix(root, "/")

within(p, root) if startswith(p, concat("", [trim_suffix(root, "/"), "/"]))

inside_roots(p) if {
	some root in roots
	within(p, root)
}

deny contains lib.denial(module, lib.misconfigured, "filesystem tool has no path_args") if {
	applies
	count(path_args) == 0
}

deny contains lib.denial(module, lib.misconfigured, "filesystem tool has no usable roots") if {
	applies
	count(lib.string_list(lib.setting("roots", []))) == 0
}

deny contains lib.denial(module, "a required argument is missing", sprintf("path argument \"%s\" is missing", [name])) if {
	applies
	some name in path_args
	lib.missing(name)
}

deny contains lib.denial(module, "path is not allowed: it must be a string", sprintf("path argument \"%s\" is not a string", [name])) if {
	applies
	some name in path_args
	not lib.missing(name)
	not lib.arg_is_string(name)
}

deny contains lib.denial(module, "path is not allowed: it is empty", sprintf("path argument \"%s\" is empty", [name])) if {
	some name, p in values
	p == ""
}

deny contains lib.denial(module, "path is not allowed: it is too long", sprintf("path argument \"%s\" is longer than %d characters", [name, max_length])) if {
	some name, p in values
	is_number(max_length)
	count(p) > max_length
}

deny contains lib.denial(module, "path is not allowed: it contains control characters", sprintf("path argument \"%s\" contains a control character (NUL, newline, ...)", [name])) if {
	some name, p in values
	lib.has_control(p)
}

deny contains lib.denial(module, "path is not allowed: backslashes are not allowed", sprintf("path argument \"%s\" contains a backslash", [name])) if {
	some name, p in values
	contains(p, `\`)
}

deny contains lib.denial(module, "path is not allowed: percent-encoding is not allowed", sprintf("path argument \"%s\" contains '%%' (percent-encoding such as %%2e or %%2f)", [name])) if {
	some name, p in values
	contains(p, "%")
}

deny contains lib.denial(module, "path is not allowed: non-ASCII characters are not allowed", sprintf("path argument \"%s\" contains non-ASCII characters", [name])) if {
	some name, p in values
	allow_non_ascii != true
	lib.has_non_ascii(p)
}

deny contains lib.denial(module, "path is not allowed: it contains look-alike or invisible characters", sprintf("path argument \"%s\" contains a Unicode look-alike of '/', '.' or '\\', or an invisible character", [name])) if {
	some name, p in values
	regex.match(lookalikes, p)
}

deny contains lib.denial(module, "path is not allowed: it must be absolute", sprintf("path argument \"%s\" is relative", [name])) if {
	some name, p in values
	p != ""
	not startswith(p, "/")
}

deny contains lib.denial(module, "path is not allowed: doubled slashes are not allowed", sprintf("path argument \"%s\" contains '//'", [name])) if {
	some name, p in values
	contains(p, "//")
}

deny contains lib.denial(module, "path is not allowed: '.' and '..' segments are not allowed", sprintf("path argument \"%s\" contains a '%s' segment (traversal)", [name, segment])) if {
	some name, p in values
	some segment in split(p, "/")
	segment in {".", ".."}
}

deny contains lib.denial(module, "path is not allowed: it is outside the allowed directories", sprintf("path argument \"%s\" is not inside any allowed root", [name])) if {
	some name, p in values
	startswith(p, "/")
	not inside_roots(p)
}
