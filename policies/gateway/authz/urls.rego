# METADATA
# title: URL restrictions
# description: |
#   For tools of kind "url", every argument listed in "url_args" must be an
#   absolute URL whose scheme is in "schemes", whose host is in "hosts" (exact)
#   or under one of "domains" (the domain itself or a subdomain), and whose
#   explicit port, if any, is in "ports". Userinfo, IP literals (IPv4, IPv6,
#   decimal, octal and hex integer forms), trailing-dot hosts, backslashes,
#   whitespace and non-ASCII characters are refused. Scheme and host are
#   compared lowercased; configure them in lowercase.
package gateway.authz.urls

import data.gateway.authz.lib.arg_is_string
import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tool

module := "urls"

applies if tool.kind == "url"

url_args := string_list(setting("url_args", []))

# For the policy gate (gate.rego): the settings that name arguments.
gate_settings := {"url_args": {"names": "list", "types": ["string"], "required": true}}

schemes contains lower(s) if some s in string_list(setting("schemes", []))

hosts contains lower(h) if some h in string_list(setting("hosts", []))

domains contains lower(d) if some d in string_list(setting("domains", []))

ports_setting := setting("ports", [])

port_list := ports_setting if {
	is_array(ports_setting)
} else := []

# Allowed explicit ports as canonical decimal strings (so "0443" never matches 443).
ports contains format_int(p, 10) if {
	some p in port_list
	is_number(p)
}

max_length := setting("max_length", 2048)

url_pattern := `^([a-zA-Z][a-zA-Z0-9+.-]*)://([^/?#]*)(.*)$`

# The string-valued URL arguments, by argument name.
values[name] := u if {
	applies
	some name in url_args
	u := arguments[name]
	is_string(u)
}

# URLs made only of printable ASCII without spaces or backslashes.
clean[name] := u if {
	some name, u in values
	regex.match(`^[\x21-\x5B\x5D-\x7E]+$`, u)
}

# The components of clean URLs, by argument name.
parsed[name] := {"scheme": lower(m[1]), "authority": m[2]} if {
	some name, u in clean
	some m in regex.find_all_string_submatch_n(url_pattern, u, 1)
}

# Authorities that carry no userinfo and no bracketed (IPv6) literal, split at ':'.
hostports[name] := split(c.authority, ":") if {
	some name, c in parsed
	not contains(c.authority, "@")
	not startswith(c.authority, "[")
}

# Hosts (lowercased) of authorities with at most one ':'.
host_of[name] := lower(parts[0]) if {
	some name, parts in hostports
	count(parts) <= 2
}

# Explicit ports, by argument name.
port_of[name] := parts[1] if {
	some name, parts in hostports
	count(parts) == 2
}

label := `[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?`

dns_pattern := concat("", ["^", label, `(\.`, label, ")*$"])

dns_syntax(host) if regex.match(dns_pattern, host)

# ip_like(host) holds for hosts that resolvers may read as an IP address:
# a numeric last label (1.2.3.4, 127.1, 2130706433, 0177.0.0.1) or a hex label
# (0x7f000001). One regex, the alternation of the two patterns.
ip_like(host) if regex.match(`(^|\.)[0-9]+$|(^|\.)0x[0-9a-f]*(\.|$)`, host)

# Hosts that are valid DNS names, by argument name.
dns_hosts[name] := host if {
	some name, host in host_of
	dns_syntax(host)
}

# Valid DNS names that resolvers may read as an IP address, by argument name.
ip_hosts[name] := host if {
	some name, host in dns_hosts
	ip_like(host)
}

host_allowed(host) if host in hosts

host_allowed(host) if host in domains

host_allowed(host) if {
	some d in domains
	d != ""
	endswith(host, concat("", [".", d]))
}

deny contains denial(module, misconfigured, "url tool has no url_args") if {
	applies
	count(url_args) == 0
}

deny contains denial(module, "a required argument is missing", sprintf("url argument \"%s\" is missing", [name])) if {
	applies
	some name in url_args
	not values[name]
	missing(name)
}

deny contains denial(module, "URL is not allowed: it must be a string", sprintf("url argument \"%s\" is not a string", [name])) if {
	applies
	some name in url_args
	not values[name]
	not missing(name)
	not arg_is_string(name)
}

deny contains denial(module, "URL is not allowed: it is too long", sprintf("url argument \"%s\" is longer than %d characters", [name, max_length])) if {
	is_number(max_length)
	some name, u in values
	count(u) > max_length
}

deny contains denial(module, "URL is not allowed: it contains whitespace, control, backslash or non-ASCII characters", sprintf("url argument \"%s\" has characters outside printable ASCII, or a backslash", [name])) if {
	some name, u in values
	not clean[name]
}

deny contains denial(module, "URL is not allowed: it is malformed", sprintf("url argument \"%s\" is not an absolute URL (scheme://authority...)", [name])) if {
	some name, _ in clean
	not parsed[name]
}

deny contains denial(module, "URL is not allowed: the scheme is not allowed", sprintf("url argument \"%s\" has scheme \"%s\", not in the allowed schemes", [name, c.scheme])) if {
	some name, c in parsed
	not c.scheme in schemes
}

deny contains denial(module, "URL is not allowed: credentials (user@host) are not allowed", sprintf("url argument \"%s\" has userinfo ('@') in its authority", [name])) if {
	some name, c in parsed
	contains(c.authority, "@")
}

deny contains denial(module, "URL is not allowed: IP address hosts are not allowed", sprintf("url argument \"%s\" has a bracketed IP literal host", [name])) if {
	some name, c in parsed
	not contains(c.authority, "@")
	startswith(c.authority, "[")
}

deny contains denial(module, "URL is not allowed: it is malformed", sprintf("url argument \"%s\" has more than one ':' in its authority", [name])) if {
	some name, parts in hostports
	count(parts) > 2
}

deny contains denial(module, "URL is not allowed: it is malformed", sprintf("url argument \"%s\" has an empty host", [name])) if {
	some name, host in host_of
	host == ""
}

deny contains denial(module, "URL is not allowed: hosts ending with '.' are not allowed", sprintf("url argument \"%s\" has a host with a trailing dot", [name])) if {
	some name, host in host_of
	endswith(host, ".")
}

deny contains denial(module, "URL is not allowed: the host is not a valid DNS name", sprintf("url argument \"%s\" has a host that is not a valid DNS name", [name])) if {
	some name, host in host_of
	host != ""
	not endswith(host, ".")
	not dns_hosts[name]
}

deny contains denial(module, "URL is not allowed: IP address hosts are not allowed", sprintf("url argument \"%s\" has a host that is an IP address or integer form (%s)", [name, host])) if {
	some name, host in ip_hosts
}

deny contains denial(module, "URL is not allowed: the host is not allowed", sprintf("url argument \"%s\" has host \"%s\", not in the allowed hosts or domains", [name, host])) if {
	some name, host in dns_hosts
	not ip_hosts[name]
	not host_allowed(host)
}

deny contains denial(module, "URL is not allowed: the port is not allowed", sprintf("url argument \"%s\" has port \"%s\", not in the allowed ports", [name, port])) if {
	some name, port in port_of
	not port in ports
}
