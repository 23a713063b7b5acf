package gateway.authz.urls_test

import data.gateway.authz.fixtures_test as fx

fetch(u) := fx.as_role("reader", "fetch_url", {"url": u})

test_allowed_urls if {
	every u in [
		"https://api.example.com/v1/items?id=3#top",
		"https://api.example.com",
		"https://api.example.com/",
		"https://api.example.com:443/v1",
		"https://api.example.com:8443/v1",
		"https://API.Example.COM/v1", # host compared lowercased
		"HTTPS://api.example.com/v1", # scheme compared lowercased
		"https://docs.example.org/guide",
		"https://v2.docs.example.org/guide",
		"https://api.example.com/a%20b", # percent-encoding is fine in the path
		"https://api.example.com?q=a@b", # '@' after the authority is not userinfo
	] {
		fx.allowed(fetch(u))
	}
}

test_scheme_not_allowed if {
	every u in ["http://api.example.com/", "ftp://api.example.com/", "file://api.example.com/etc/passwd", "gopher://api.example.com/"] {
		d := fetch(u)
		d.message == "URL is not allowed: the scheme is not allowed"
		fx.has_reason(d, "not in the allowed schemes")
	}
}

test_host_not_allowed if {
	every u in [
		"https://evil.com/",
		"https://api.example.com.evil.com/",
		"https://evilapi.example.com/",
		"https://example.com/",
		"https://evildocs.example.org/",
		"https://docs.example.org.evil.com/",
		"https://localhost/",
		"https://metadata.google.internal/",
		"https://evil.com#@api.example.com",
		"https://evil.com?@api.example.com",
		"https://evil.com/@api.example.com",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: the host is not allowed"
		fx.has_reason(d, "not in the allowed hosts or domains")
	}
}

test_userinfo_denied if {
	every u in [
		"https://api.example.com@evil.com/",
		"https://user:pass@api.example.com/",
		"https://api.example.com:443@evil.com/",
		"https://@api.example.com/",
		"https://evil.com%2f@api.example.com/",
		"https://a@b@api.example.com/",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: credentials (user@host) are not allowed"
		fx.has_reason(d, "has userinfo ('@') in its authority")
	}
}

test_ipv4_literals_denied if {
	every u in [
		"https://127.0.0.1/",
		"https://169.254.169.254/latest/meta-data/",
		"https://10.0.0.1:443/",
		"https://127.1/",
		"https://0177.0.0.1/", # octal
		"https://2130706433/", # decimal integer
		"https://0x7f000001/", # hex integer
		"https://0x7f.0.0.1/", # hex label
		"https://0/",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: IP address hosts are not allowed"
		fx.has_reason(d, "is an IP address or integer form")
	}
}

test_ipv6_literals_denied if {
	every u in [
		"https://[::1]/",
		"https://[::ffff:127.0.0.1]/",
		"https://[fe80::1%25eth0]/",
		"https://[::1]:443/",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: IP address hosts are not allowed"
		fx.has_reason(d, "bracketed IP literal")
	}
}

test_unbracketed_ipv6_malformed if {
	d := fetch("https://::1/")
	d.message == "URL is not allowed: it is malformed"
	fx.has_reason(d, "more than one ':' in its authority")
}

test_port_not_allowed if {
	every u in [
		"https://api.example.com:80/",
		"https://api.example.com:22/",
		"https://api.example.com:0443/", # leading zero
		"https://api.example.com:443x/",
		"https://api.example.com:/",
		"https://api.example.com:65979/",
		"https://api.example.com:-1/",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: the port is not allowed"
		fx.has_reason(d, "not in the allowed ports")
	}
}

test_trailing_dot_host_denied if {
	every u in ["https://api.example.com./", "https://api.example.com..:443/"] {
		d := fetch(u)
		d.message == "URL is not allowed: hosts ending with '.' are not allowed"
		fx.has_reason(d, "has a host with a trailing dot")
	}
}

test_invalid_dns_names_denied if {
	every u in [
		"https://api_example.com/",
		"https://api.example.com%2f.evil.com/",
		"https://-api.example.com/",
		"https://api..example.com/",
		"https://.api.example.com/",
		"https://api.example.com!/",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: the host is not a valid DNS name"
		fx.has_reason(d, "not a valid DNS name")
	}
}

test_empty_host_denied if {
	every u in ["https:///api.example.com/", "https://:443/", "https://"] {
		d := fetch(u)
		fx.has_message(d, "URL is not allowed: it is malformed")
		fx.has_reason(d, "has an empty host")
	}
}

test_malformed_urls_denied if {
	every u in [
		"api.example.com/v1",
		"//api.example.com/v1",
		"https:api.example.com",
		"https:/api.example.com",
		"1https://api.example.com",
		"/v1/items",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: it is malformed"
		fx.has_reason(d, "is not an absolute URL")
	}
}

test_unclean_characters_denied if {
	every u in [
		"https://api.example.com\\@evil.com/",
		"https://api.example.com\\.evil.com/",
		"https://api.example.com/ x",
		" https://api.example.com/",
		"https://api.example.com/\n",
		"https://api.example.com\u0000.evil.com/",
		"https://api\uff0eexample\uff0ecom/",
		"https://\u0430pi.example.com/", # Cyrillic a
		"",
	] {
		d := fetch(u)
		d.message == "URL is not allowed: it contains whitespace, control, backslash or non-ASCII characters"
		fx.has_reason(d, "has characters outside printable ASCII, or a backslash")
	}
}

test_too_long_url_denied if {
	long := concat("", ["https://api.example.com/", concat("", [x | some _ in numbers.range(1, 2100); x := "a"])])
	d := fetch(long)
	d.message == "URL is not allowed: it is too long"
	fx.has_reason(d, "is longer than 2048 characters")
}

test_non_string_url_denied if {
	every u in [["https://api.example.com/"], {"href": "https://api.example.com/"}, 443, false] {
		d := fetch(u)
		d.message == "URL is not allowed: it must be a string"
	}
}

test_missing_url_denied if {
	d := fx.as_role("reader", "fetch_url", {})
	d.message == "a required argument is missing"
	fx.has_reason(d, "urls: url argument \"url\" is missing")
}

test_missing_url_args_is_misconfiguration if {
	d := fetch("https://api.example.com/") with data.gateway.config.tools.fetch_url.url_args as []
	d.message == "this tool is not configured correctly"
	fx.has_reason(d, "urls: url tool has no url_args")
}

test_no_ports_configured_refuses_explicit_ports if {
	fx.allowed(fetch("https://api.example.com/")) with data.gateway.config.tools.fetch_url.ports as null
	d := fetch("https://api.example.com:443/") with data.gateway.config.tools.fetch_url.ports as null
	d.message == "URL is not allowed: the port is not allowed"
	d2 := fetch("https://api.example.com:443/") with data.gateway.config.tools.fetch_url.ports as "443"
	d2.message == "URL is not allowed: the port is not allowed"
}

test_uppercase_config_normalised if {
	fx.allowed(fetch("https://api.example.com/")) with data.gateway.config.tools.fetch_url.hosts as ["API.EXAMPLE.COM"]
}
