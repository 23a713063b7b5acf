package gateway.authz.paths_test

import data.gateway.authz.fixtures_test as fx
import data.gateway.authz.paths

read(p) := fx.as_role("reader", "read_file", {"path": p})

write(p) := fx.as_role("writer", "write_file", {"path": p})

test_paths_inside_roots_allowed if {
	every p in [
		"/srv/tenants/acme/report.txt",
		"/srv/tenants/acme/sub/dir/file.csv",
		"/srv/tenants/acme",
		"/srv/tenants/acme/",
		"/srv/shared/handbook.pdf",
		"/srv/tenants/acme/name with spaces.txt",
		"/srv/tenants/acme/..hidden-but-not-traversal",
		"/srv/tenants/acme/file...txt",
	] {
		fx.allowed(read(p))
	}
	fx.allowed(write("/srv/tenants/acme/out.txt"))
}

test_other_tenant_root_denied if {
	d := read("/srv/tenants/globex/secret.txt")
	d.message == "path is not allowed: it is outside the allowed directories"
	fx.has_reason(d, "paths: path argument \"path\" is not inside any allowed root")
	fx.allowed(fx.decide("read_file", {"path": "/srv/tenants/globex/secret.txt"}, fx.context(["reader"], "globex")))
}

test_root_prefix_sibling_denied if {
	every p in ["/srv/tenants/acme-evil/x", "/srv/tenants/acmex", "/srv/shared2/x", "/srv/tenants", "/srv"] {
		d := read(p)
		d.message == "path is not allowed: it is outside the allowed directories"
	}
}

test_write_confined_to_tenant_root if {
	d := write("/srv/shared/handbook.pdf")
	d.message == "path is not allowed: it is outside the allowed directories"
}

test_absolute_escapes_denied if {
	every p in ["/etc/passwd", "/", "/root/.ssh/id_rsa", "/proc/self/environ"] {
		d := read(p)
		d.message == "path is not allowed: it is outside the allowed directories"
	}
}

test_relative_paths_denied if {
	every p in ["srv/tenants/acme/x", "./x", "x", "~/x", "~root/x", "file:///srv/tenants/acme/x"] {
		d := read(p)
		fx.has_message(d, "path is not allowed: it must be absolute")
		fx.has_reason(d, "paths: path argument \"path\" is relative")
	}
}

test_dot_dot_traversal_denied if {
	every p in [
		"/srv/tenants/acme/../globex/secret.txt",
		"/srv/tenants/acme/..",
		"/srv/tenants/acme/sub/../../globex/x",
		"/srv/shared/../../etc/passwd",
		"/srv/tenants/acme/./../globex",
	] {
		d := read(p)
		d.message == "path is not allowed: '.' and '..' segments are not allowed"
		fx.has_reason(d, "contains a '..' segment (traversal)")
	}
}

test_single_dot_segment_denied if {
	d := read("/srv/tenants/acme/./x")
	d.message == "path is not allowed: '.' and '..' segments are not allowed"
	fx.has_reason(d, "contains a '.' segment")
}

test_doubled_slashes_denied if {
	every p in ["/srv/tenants/acme//x", "//srv/tenants/acme/x", "/srv/tenants/acme/x//"] {
		d := read(p)
		fx.has_message(d, "path is not allowed: doubled slashes are not allowed")
		fx.has_reason(d, "contains '//'")
	}
}

test_percent_encoding_denied if {
	every p in [
		"/srv/tenants/acme/%2e%2e/globex/x",
		"/srv/tenants/acme/%2E%2E%2Fglobex",
		"/srv/tenants/acme/..%2fglobex",
		"/srv/tenants/acme/%252e%252e/x",
		"/srv/tenants/acme/%c0%ae%c0%ae/x",
		"/srv/tenants/acme/100%",
	] {
		d := read(p)
		d.message == "path is not allowed: percent-encoding is not allowed"
		fx.has_reason(d, "contains '%' (percent-encoding such as %2e or %2f)")
	}
}

test_backslashes_denied if {
	every p in ["/srv/tenants/acme/..\\globex\\x", "\\srv\\tenants\\acme\\x", "/srv/tenants/acme/a\\b"] {
		d := read(p)
		fx.has_message(d, "path is not allowed: backslashes are not allowed")
		fx.has_reason(d, "contains a backslash")
	}
}

test_nul_and_control_characters_denied if {
	every p in ["/srv/tenants/acme/x\u0000.txt", "/srv/tenants/acme/x\n", "/srv/tenants/acme/\tx", "/srv/tenants/acme/x\u007f"] {
		d := read(p)
		d.message == "path is not allowed: it contains control characters"
		fx.has_reason(d, "contains a control character")
	}
}

test_unicode_lookalikes_denied if {
	every p in [
		"/srv/tenants/acme/\uff0e\uff0e/globex/x", # fullwidth full stops
		"/srv/tenants/acme/..\uff0fglobex", # fullwidth solidus
		"/srv/tenants/acme/..\u2215globex", # division slash
		"/srv/tenants/acme/..\u2044globex", # fraction slash
		"/srv/tenants/acme/\u2025/globex", # two dot leader
		"/srv/tenants/acme/..\uff3cglobex", # fullwidth reverse solidus
		"/srv/tenants/acme/x\u200b", # zero-width space
		"/srv/tenants/acme/\u202egnp.exe", # right-to-left override
	] {
		d := read(p)
		fx.has_message(d, "path is not allowed: it contains look-alike or invisible characters")
		fx.has_message(d, "path is not allowed: non-ASCII characters are not allowed")
	}
}

test_non_ascii_denied_by_default if {
	d := read("/srv/tenants/acme/r\u00e9sum\u00e9.txt")
	d.message == "path is not allowed: non-ASCII characters are not allowed"
	fx.has_reason(d, "contains non-ASCII characters")
}

test_non_ascii_allowed_when_configured if {
	fx.allowed(read("/srv/tenants/acme/r\u00e9sum\u00e9.txt")) with data.gateway.config.tools.read_file.allow_non_ascii as true
}

test_lookalikes_denied_even_when_non_ascii_allowed if {
	every p in ["/srv/tenants/acme/..\uff0fglobex", "/srv/tenants/acme/\uff0e\uff0e", "/srv/tenants/acme/\ufeffx"] {
		d := read(p) with data.gateway.config.tools.read_file.allow_non_ascii as true
		d.message == "path is not allowed: it contains look-alike or invisible characters"
		fx.has_reason(d, "contains a Unicode look-alike")
	}
}

test_empty_path_denied if {
	d := read("")
	d.message == "path is not allowed: it is empty"
	fx.has_reason(d, "path argument \"path\" is empty")
}

test_too_long_path_denied if {
	long := concat("", ["/srv/tenants/acme/", concat("", [x | some _ in numbers.range(1, 5000); x := "a"])])
	d := read(long)
	d.message == "path is not allowed: it is too long"
	fx.has_reason(d, "is longer than 4096 characters")
}

test_non_string_path_denied if {
	every p in [["/srv/tenants/acme/x"], {"path": "/srv/tenants/acme/x"}, 1, true] {
		d := read(p)
		d.message == "path is not allowed: it must be a string"
		fx.has_reason(d, "path argument \"path\" is not a string")
	}
}

test_missing_path_denied if {
	every args in [{}, {"path": null}, {"file": "/srv/tenants/acme/x"}] {
		d := fx.as_role("reader", "read_file", args)
		d.message == "a required argument is missing"
		fx.has_reason(d, "paths: path argument \"path\" is missing")
	}
}

test_tenant_root_needs_tenant if {
	d := fx.decide("read_file", {"path": "/srv/tenants/acme/x"}, {"subject": "alice", "roles": ["reader"]})
	fx.has_message(d, "a caller tenant is required for this tool")
	fx.allowed(fx.decide("read_file", {"path": "/srv/shared/x"}, {"subject": "alice", "roles": ["reader"]})) with data.gateway.config.tools.read_file.roots as ["/srv/shared/"]
}

test_roots_resolved_for_tenant if {
	paths.roots == {"/srv/tenants/acme/", "/srv/shared/"} with input as fx.request("read_file", {}, fx.context(["reader"], "acme"))
}

test_relative_and_non_string_roots_ignored if {
	d := read("/srv/tenants/acme/x") with data.gateway.config.tools.read_file.roots as ["srv/tenants/{tenant}/", 7]
	d.message == "path is not allowed: it is outside the allowed directories"
}

test_root_without_trailing_slash if {
	fx.allowed(read("/srv/tenants/acme/x")) with data.gateway.config.tools.read_file.roots as ["/srv/tenants/{tenant}"]
	d := read("/srv/tenants/acme2/x") with data.gateway.config.tools.read_file.roots as ["/srv/tenants/{tenant}"]
	d.allow == false
}

test_missing_path_args_is_misconfiguration if {
	d := read("/srv/tenants/acme/x") with data.gateway.config.tools.read_file.path_args as null
	d.message == "this tool is not configured correctly"
	fx.has_reason(d, "paths: filesystem tool has no path_args")
}

test_missing_roots_is_misconfiguration if {
	d := read("/srv/tenants/acme/x") with data.gateway.config.tools.read_file.roots as []
	fx.has_message(d, "this tool is not configured correctly")
	fx.has_reason(d, "paths: filesystem tool has no usable roots")
}

test_multiple_path_args_all_checked if {
	d := fx.as_role("reader", "read_file", {"path": "/srv/shared/a", "dest": "/etc/x"}) with data.gateway.config.tools.read_file.path_args as ["path", "dest"]
	d.message == "path is not allowed: it is outside the allowed directories"
	fx.has_reason(d, "path argument \"dest\" is not inside any allowed root")
}

# resolved(p, facts) is a read of p with the gateway's resolved-path facts for it.
resolved(p, f) := d if {
	req := fx.request("read_file", {"path": p}, fx.context(["reader"], "acme"))
	d := data.gateway.authz.decision with input as object.union(req, {"facts": {"version": 1, "arguments": {"/path": {"path": f}}}})
}

test_a_path_resolving_inside_the_roots_is_allowed if {
	fx.allowed(resolved("/srv/tenants/acme/a.txt", {"resolved": "/srv/tenants/acme/a.txt", "exists": true}))
	fx.allowed(resolved("/srv/tenants/acme/link/a.txt", {"resolved": "/srv/shared/a.txt", "exists": true}))
}

test_a_symbolic_link_leading_to_another_tenant_is_denied if {
	d := resolved("/srv/tenants/acme/link/pay.csv", {"resolved": "/srv/tenants/globex/pay.csv", "exists": true})
	d.message == "path is not allowed: it leads outside the allowed directories"
	fx.has_reason(d, "resolves, through a symbolic link, outside every allowed root")
}

test_a_path_the_gateway_could_not_resolve_is_denied if {
	every f in [
		{"resolved": null, "error": "loop"},
		{"resolved": null, "error": "outside_view"},
		{"resolved": 7},
		{},
		"garbage",
	] {
		d := resolved("/srv/tenants/acme/a.txt", f)
		d.message == "path is not allowed: it cannot be resolved"
	}
}

test_only_true_makes_a_tool_require_resolution if {
	every v in ["true", 1, "yes", false] {
		fx.allowed(read("/srv/tenants/acme/a.txt")) with data.gateway.config.tools.read_file.require_resolved as v
	}
}

test_a_tool_requiring_resolution_is_denied_without_facts if {
	req := fx.request("read_file", {"path": "/srv/tenants/acme/a.txt"}, fx.context(["reader"], "acme"))
	d := data.gateway.authz.decision with input as req
		with data.gateway.config.tools.read_file.require_resolved as true
	fx.has_reason(d, "has no resolved-path facts, which the tool requires")
	fx.allowed(resolved("/srv/tenants/acme/a.txt", {"resolved": "/srv/tenants/acme/a.txt", "exists": false})) with data.gateway.config.tools.read_file.require_resolved as true
}
