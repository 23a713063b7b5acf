# METADATA
# title: Decision-log masking
# description: |
#   OPA evaluates data.system.log.mask on every decision-log event before it is
#   written (console, service or plugin). The event's input is the gateway's
#   input document: this policy masks, in input.arguments and input.context,
#   the same values the gateway's audit trail masks (gateway.audit.Masker with
#   its default patterns):
#   - the value of every member whose normalised name matches name_patterns;
#   - every string that matches value_patterns, whatever its member name;
#   and then every other string of the input or the result that contains one
#   of those values (a policy message echoing a secret). Each becomes the text
#   "masked" (op upsert), and OPA lists its path in the event's "masked" field.
#   Extra patterns and exact names come from data.gateway.audit.mask_patterns,
#   mask_values and mask_keys (the gateway's audit.mask_* settings).
#   OPA splits a mask path at every "/" and URL-escapes each part before the
#   lookup, so a member whose name is not made of [A-Za-z0-9._~$&+:=@-] cannot be
#   addressed: its nearest addressable container is masked instead.
#   The gateway's tests hold the patterns and normalisation to the gateway's own.
package system.log

# Searched in a normalised member name (normalize_name): gateway.audit.DEFAULT_NAME_PATTERNS.
name_patterns := [
	`pass(word|wd|phrase|code)`,
	`(^|_)(pass|pw|pword)(_|$)`,
	`pwd`,
	`secret`,
	`token`,
	`credential`,
	`(^|_)creds?(_|$)`,
	`cookie`,
	`bearer`,
	`authori[sz]ation`,
	`(^|_)(auth|authn)(_|$)`,
	`api_?keys?`,
	`(api|access|private|secret|signing|sign|encryption|encrypt|decryption|decrypt|master|client|consumer|app|application|account|service|storage|auth|session|shared|hmac|ssh|gpg|pgp|rsa|aes|jwt|tls|ssl|webhook|deploy|license|root|admin|crypto|cipher|wrapping|pass|subscription)_?keys?`,
	`private`,
	`(^|_)(pem|pkcs|pfx|p_12|keystore|keyfile|key_file|keypair|key_pair|pat)(_|$)`,
	`session`,
	`signature`,
	`(^|_)sig(_|$)`,
	`jwt`,
	`(^|_)(otp|totp|hotp|mfa|pin|cvv|cvc|ssn)(_|$)`,
	`card_?number`,
	`credit_?card`,
	`(^|_)dsn(_|$)`,
	`conn(ection)?_?str(ing)?`,
]

# Searched in every string value: gateway.audit.DEFAULT_VALUE_PATTERNS.
value_patterns := [
	`(?i)bearer[ \t]+[a-z0-9._~+/=-]{8}`,
	`(?i)(password|passwd|pwd|secret|token|api[_-]?key|authorization|cookie|credential)s?["']?[ \t]*[:=]`,
	`-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY`,
	`(^|[^A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}[.][A-Za-z0-9_-]{8,}[.]`,
	`://[^/ \t\r\n:@]+:[^/ \t\r\n@]*@`,
	`(AKIA|ASIA)[0-9A-Z]{16}`,
	`(gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{22})`,
	`xox[abposr]-[0-9A-Za-z-]{10}`,
	`(^|[^A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20}`,
	`(sk|rk)_live_[A-Za-z0-9]{16}`,
	`glpat-[A-Za-z0-9_-]{20}`,
	`AIza[0-9A-Za-z_-]{35}`,
]

# What a masked value becomes in the decision log.
replacement := "masked"

default extra_name_patterns := []

extra_name_patterns := data.gateway.audit.mask_patterns

default extra_value_patterns := []

extra_value_patterns := data.gateway.audit.mask_values

default extra_keys := []

extra_keys := data.gateway.audit.mask_keys

_name_regex := _alternation(array.concat(name_patterns, extra_name_patterns))

_value_regex := _alternation(array.concat(value_patterns, extra_value_patterns))

# Exact names, compared without case or separators: gateway.audit.DEFAULT_MASKED_KEYS.
default_keys := {
	"accesstoken", "apikey", "authorization", "cardnumber", "clientsecret", "creditcard",
	"cvv", "idtoken", "passphrase", "passwd", "password", "privatekey", "refreshtoken",
	"secret", "ssn", "token",
}

_keys := default_keys | {_compact(k) | some k in extra_keys; is_string(k)}

_alternation(patterns) := concat("|", [sprintf("(?:%s)", [p]) | some p in patterns])

_compact(name) := regex.replace(lower(name), `[^a-z0-9]`, "")

# A member name as lower-case ASCII words joined by "_" (the gateway's normalize_name):
# words end at every character other than an ASCII letter or digit, between a lower-case
# and an upper-case letter, before the last capital of a run followed by a lower-case
# letter, and between letters and digits.
normalize_name(name) := trim(lower(regex.replace(s4, `[^A-Za-z0-9]+`, "_")), "_") if {
	s1 := regex.replace(name, `([A-Z]+)([A-Z][a-z])`, "${1}_${2}")
	s2 := regex.replace(s1, `([a-z])([A-Z])`, "${1}_${2}")
	s3 := regex.replace(s2, `([A-Za-z])([0-9])`, "${1}_${2}")
	s4 := regex.replace(s3, `([0-9])([A-Za-z])`, "${1}_${2}")
}

# A name longer than the gateway's MAX_NAME_LENGTH is masked without being matched.
max_name_length := 256

sensitive_name(name) if count(name) > max_name_length

sensitive_name(name) if {
	count(name) <= max_name_length
	regex.match(_name_regex, normalize_name(name))
}

sensitive_name(name) if _compact(name) in _keys

# The name squashed (lower case, letters and digits only): a word its case or a separator
# cuts in two (dbPASSword, xAPIkey, db_pa.ssword) is matched there too.
sensitive_name(name) if {
	count(name) <= max_name_length
	regex.match(_name_regex, _compact(name))
}

sensitive_value(value) if regex.match(_value_regex, value)

# Paths (from the event root) of the values to mask, each with its value.
_found[path] := value if {
	some root in ["arguments", "context"]
	walk(input.input[root], [below, value])
	_sensitive_at(below, value)
	path := array.concat(["input", root], below)
}

# A member whose name looks like a credential itself ({"AKIA...": 1}): its container is
# masked, since a mask path would still carry the name.
_found[path] := value if {
	some root in ["arguments", "context"]
	walk(input.input[root], [below, value])
	is_object(value)
	some name, _ in value
	is_string(name)
	sensitive_value(name)
	path := array.concat(["input", root], below)
}

_sensitive_at(below, _) if {
	name := below[count(below) - 1]
	is_string(name)
	sensitive_name(name)
}

_sensitive_at(_, value) if {
	is_string(value)
	sensitive_value(value)
}

# The raw strings found under the masked paths (the gateway scrubs values of 4 or more).
_secrets contains text if {
	some value in _found
	walk(value, [_, text])
	is_string(text)
	count(text) >= 4
}

# A masked string shaped like a credential is also cut into pieces: the credential inside it may be
# echoed without its surroundings (the token of "Bearer <token>").
_secrets contains piece if {
	some value in _found
	walk(value, [_, text])
	is_string(text)
	sensitive_value(text)
	some piece in regex.split(`[ \t\r\n"'=:,;]+`, text)
	count(piece) >= 8
}

# Such a name is a secret an echo is scrubbed of, as a masked value is.
_secrets contains name if {
	some root in ["arguments", "context"]
	walk(input.input[root], [_, value])
	is_object(value)
	some name, _ in value
	is_string(name)
	sensitive_value(name)
}

# Every other string that contains one of them, in the input or in the result.
_echoes contains path if {
	some root in ["input", "result"]
	walk(input[root], [below, text])
	is_string(text)
	some secret in _secrets
	contains(text, secret)
	path := array.concat([root], below)
}

_targets contains path if some path, _ in _found

_targets contains path if some path in _echoes

# The outermost targets only: masking a container masks everything below it.
_outermost contains path if {
	some path in _targets
	not _inside_target(path)
}

_inside_target(path) if {
	count(path) > 1
	some n in numbers.range(1, count(path) - 1)
	array.slice(path, 0, n) in _targets
}

_addressable(part) if is_number(part)

_addressable(part) if {
	is_string(part)
	regex.match(`^[A-Za-z0-9._~$&+:=@-]*$`, part)
}

# The path itself, or its nearest container that OPA can address.
_addressed(path) := array.slice(path, 0, min(unaddressable)) if {
	unaddressable := {i | some i, part in path; not _addressable(part)}
	count(unaddressable) > 0
} else := path

_part(part) := format_int(part, 10) if is_number(part)

_part(part) := part if is_string(part)

_pointer(path) := concat("/", ["", concat("/", [_part(p) | some p in path])])

mask contains {"op": "upsert", "path": _pointer(_addressed(path)), "value": replacement} if {
	some path in _outermost
}
