package system.log_test

import data.system.log

_upsert(path) := {"op": "upsert", "path": path, "value": "masked"}

_event(arguments, context) := {"input": {"tool": {"name": "t"}, "arguments": arguments, "context": context}}

test_names_are_normalised_into_words if {
	log.normalize_name("X-API-Key") == "x_api_key"
	log.normalize_name("xApiKey") == "x_api_key"
	log.normalize_name("XAPIKey") == "xapi_key"
	log.normalize_name("x.api.key") == "x_api_key"
	log.normalize_name("__DB__PASSWORD__") == "db_password"
	log.normalize_name("oauth2Token") == "oauth_2_token"
	log.normalize_name("contraseña") == "contrase_a"
	log.normalize_name("") == ""
}

test_sensitive_names_in_every_style if {
	every name in [
		"db_password", "auth_token", "X-API-Key", "github_token",
		"aws_secret_access_key", "session_token", "secret_key", "private_key_pem",
		"credentials", "cookie", "bearer", "dbPassword", "DB.PASSWORD", "Api Key",
		"clientSecret", "Set-Cookie", "Proxy-Authorization", "signingKey", "pin",
		"dbPASSword", "xAPIkey", "SECretKey", "db_pa.ssword", "creDENTials", "cooKIE",
	] {
		log.sensitive_name(name)
	}
}

test_innocent_names if {
	every name in ["keyword", "monkey", "key", "primary_key", "author", "query", "subject"] {
		not log.sensitive_name(name)
	}
}

test_configured_names_and_patterns if {
	log.sensitive_name("IBAN") with data.gateway.audit.mask_keys as ["iban"]
	log.sensitive_name("accountNumber") with data.gateway.audit.mask_patterns as ["account_number"]
	log.sensitive_value("ACME-1234") with data.gateway.audit.mask_values as ["ACME-[0-9]+"]
	not log.sensitive_name("IBAN")
}

test_secret_looking_values if {
	every value in [
		"Bearer abcdefghijkl", "curl -H 'Authorization: Basic dXNlcjpwdw=='",
		"postgres://app:hunter2@db/app", "-----BEGIN RSA PRIVATE KEY-----",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln", "password=hunter2",
	] {
		log.sensitive_value(value)
	}
	not log.sensitive_value("an ordinary sentence")
	not log.sensitive_value("https://example.com/a/b")
}

test_masks_sensitive_members_of_arguments_and_context_at_any_depth if {
	masks := log.mask with input as _event(
		{"db_password": "pw-1", "query": "q", "items": [{"nested": {"authToken": {"v": 1}}}]},
		{"subject": "alice", "session": "s-1"},
	)
	masks == {
		_upsert("/input/arguments/db_password"),
		_upsert("/input/arguments/items/0/nested/authToken"),
		_upsert("/input/context/session"),
	}
}

test_masks_secret_looking_strings_whatever_their_name if {
	masks := log.mask with input as _event({"cmd": "Bearer abcdefghijkl", "n": ["ok", "x://u:p@h"]}, {})
	masks == {_upsert("/input/arguments/cmd"), _upsert("/input/arguments/n/1")}
}

test_masks_strings_that_echo_a_secret_in_the_input_and_the_result if {
	event := object.union(
		_event({"password": "hunter22", "note": "it is hunter22"}, {}),
		{"result": {"allow": false, "message": "hunter22 refused", "reasons": ["ok", "saw hunter22"]}},
	)
	masks := log.mask with input as event
	masks == {
		_upsert("/input/arguments/password"),
		_upsert("/input/arguments/note"),
		_upsert("/result/message"),
		_upsert("/result/reasons/1"),
	}
}

test_short_secrets_are_not_scrubbed_from_other_strings if {
	masks := log.mask with input as _event({"pin": "123", "note": "page 123"}, {})
	masks == {_upsert("/input/arguments/pin")}
}

test_only_the_outermost_sensitive_member_is_masked if {
	masks := log.mask with input as _event({"credentials": {"password": "pw-2", "user": "u"}}, {})
	masks == {_upsert("/input/arguments/credentials")}
}

test_a_member_that_opa_cannot_address_masks_its_container if {
	masks := log.mask with input as _event({"a": {"x/y": {"token": "t-12345"}}, "b": "kept"}, {})
	masks == {_upsert("/input/arguments/a")}
}

test_a_result_member_that_opa_cannot_address_masks_the_result if {
	event := object.union(_event({"token": "t-12345"}, {}), {"result": {"a b": "t-12345"}})
	masks := log.mask with input as event
	masks == {_upsert("/input/arguments/token"), _upsert("/result")}
}

test_nothing_to_mask if {
	masks := log.mask with input as _event({"query": "q"}, {"subject": "alice"})
	masks == set()
}

test_an_event_without_gateway_input_masks_nothing if {
	masks := log.mask with input as {"input": "not an object"}
	masks == set()
}

test_a_name_too_long_to_match_is_masked if {
	long := concat("", [x | some _ in numbers.range(1, 52); x := "query"])
	count(long) > log.max_name_length
	log.sensitive_name(long)
	not log.sensitive_name(substring(long, 0, log.max_name_length))
}

test_the_credential_inside_a_secret_shaped_string_is_scrubbed_alone if {
	masks := log.mask with input as _event({"h": "Bearer tok-abcdefgh", "n": "was tok-abcdefgh", "m": "Bearer"}, {})
	masks == {_upsert("/input/arguments/h"), _upsert("/input/arguments/n")}
}

test_a_member_named_like_a_credential_masks_its_container if {
	event := _event({"q": {"AKIAIOSFODNN7EXAMPLE": 1}, "b": "kept"}, {})
	masks := log.mask with input as event
	masks == {_upsert("/input/arguments/q")}
}

test_a_credential_named_member_at_the_top_masks_the_arguments if {
	masks := log.mask with input as _event({"AKIAIOSFODNN7EXAMPLE": 1, "b": "kept"}, {})
	masks == {_upsert("/input/arguments")}
}

test_an_echo_of_a_credential_named_member_is_masked if {
	event := object.union(_event({"q": {"AKIAIOSFODNN7EXAMPLE": 1}}, {}), {"result": {"m": "AKIAIOSFODNN7EXAMPLE"}})
	masks := log.mask with input as event
	masks == {_upsert("/input/arguments/q"), _upsert("/result/m")}
}
