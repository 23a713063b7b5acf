# `opa test` suite for the test policy; the embedded engine skips *_test.rego files.
package gateway.authz_test

import data.gateway.authz

alice_echo := {"tool": {"name": "echo"}, "arguments": {"text": "hi"}, "context": {"subject": "alice"}}

test_known_subject_allowed if {
	authz.decision == {"allow": true, "cache": {"ttl_s": 30}} with input as alice_echo
}

test_unknown_subject_denied_with_reasons if {
	d := authz.decision with input as {
		"tool": {"name": "echo"},
		"arguments": {"text": "blocked"},
		"context": {"subject": "mallory"},
	}
	d.allow == false
	d.message == "not authorized: ask an administrator"
	d.reasons == {"subject: not on the allow list", "text: the word \"blocked\" is refused"}
}

test_missing_context_denied if {
	d := authz.decision with input as {"tool": {"name": "echo"}, "arguments": {}, "context": {}}
	d.reasons == {"subject: missing from the caller context"}
}

test_big_number_must_be_exact if {
	authz.allow with input as {"tool": {"name": "big"}, "arguments": {"n": 9007199254740993}, "context": {"subject": "alice"}}
	not authz.allow with input as {"tool": {"name": "big"}, "arguments": {"n": 9007199254740992}, "context": {"subject": "alice"}}
}

test_data_json_loaded if {
	authz.subjects == ["alice", "bob"]
}
