# Decision documents that misbehave on purpose, for the fault and contract tests.
package gateway.faults

# Defined as a rule, but never true for any input the tests send.
nothing if input.never_sent == "never"

bool_true := true

bool_false := false

string_allow := {"allow": "yes"}

string_true_allow := {"allow": "true"}

number := 1

number_allow := {"allow": 1}

null_allow := {"allow": null}

# Defined, with the value null: malformed, not undefined.
null_decision := null

extra_members := {"allow": true, "extra": 1}

reasons_not_strings := {"allow": false, "reasons": [1, 2]}

negative_ttl := {"allow": true, "cache": {"ttl_s": -1}}

set_reasons := {"allow": false, "message": "refused", "reasons": {"zulu", "alpha", "mike"}}

nested_sets := {"b": {3, 1, 2}, "a": [{"z", "y"}]}

# Two complete definitions that both hold: OPA answers 500 (eval_conflict_error) and
# regorus raises. Conditional, so that neither compiler can see it before evaluation.
conflict := 1 if input.tool

conflict := 2 if input.tool

# Quadratic in the length of input.arguments.xs: seconds for a few thousand items, on
# every engine. The deadline tests send such an input.
slow := count([1 | some i, j; input.arguments.xs[i] == input.arguments.xs[j]])
