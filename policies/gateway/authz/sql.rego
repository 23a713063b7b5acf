# METADATA
# title: SQL restrictions
# description: |
#   For tools of kind "sql", every argument listed in "sql_args" must be a
#   single statement without comments. Unless one of the caller's roles lists
#   the tool in "sql_write_tools", the statement must be read-only: it starts
#   with SELECT or WITH and contains no data-changing keyword (this also
#   catches data-modifying CTEs, SELECT ... INTO and FOR UPDATE). DDL/DCL
#   keywords and the functions in "denied_functions" are refused for everyone.
#   The check is lexical and conservative: a keyword inside a string literal
#   is refused too; pass values as query parameters instead.
package gateway.authz.sql

import data.gateway.authz.lib.arg_is_string
import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.caller_role_defs
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tool
import data.gateway.authz.lib.tool_name

module := "sql"

applies if tool.kind == "sql"

sql_args := string_list(setting("sql_args", []))

max_length := setting("max_length", 10000)

# Keywords that change data; allowed only for roles with write access to the tool.
write_keywords := {
	"insert", "update", "delete", "merge", "upsert", "into",
}

# Keywords refused for everyone (DDL, DCL, session, procedural and file access).
forbidden_keywords := {
	"alter", "analyze", "attach", "call", "copy", "create", "deallocate",
	"detach", "drop", "exec", "execute", "grant", "handler", "lock",
	"outfile", "dumpfile", "pragma", "prepare", "reindex", "revoke", "shutdown",
	"truncate", "vacuum",
}

# Statement starts for read-only and for write access.
read_starts := `^(select|with)([^a-z0-9_$]|$)`

write_starts := `^(select|with|insert|update|delete|merge)([^a-z0-9_$]|$)`

# The caller may write through this tool.
writer if {
	some def in caller_role_defs
	tool_name in string_list(def.sql_write_tools)
}

denied_function_settings := string_list(setting("denied_functions", []))

# Function names from settings that are plain identifiers (safe inside a regex). The
# first branch needs one regex for the usual case where every entry is an identifier:
# then the entries joined with "," match, and no entry contains ",", so the joined text
# has exactly one piece per entry.
denied_functions := {lower(f) | some f in denied_function_settings} if {
	joined := concat(",", denied_function_settings)
	regex.match(`^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$`, joined)
	count(split(joined, ",")) == count(denied_function_settings)
} else := {lower(f) |
	some f in denied_function_settings
	regex.match(`^[A-Za-z_][A-Za-z0-9_]*$`, f)
}

# The string-valued SQL arguments, by argument name.
raw[name] := q if {
	applies
	some name in sql_args
	q := arguments[name]
	is_string(q)
}

# Printable-ASCII queries (tab, CR and LF allowed), lowercased and trimmed, by argument name.
# Only these are inspected further, so case mapping and trimming never see non-ASCII text.
values[name] := trim_space(lower(q)) if {
	some name, q in raw
	regex.match(`^[\t\n\r\x20-\x7E]*$`, q)
}

# word_pattern(w) matches text that contains w (a word, or words separated by "|") as a
# whole word.
word_pattern(w) := concat("", ["(^|[^a-z0-9_$])(", w, ")([^a-z0-9_$]|$)"])

# word(q, w) holds when q contains w as a whole word.
word(q, w) if regex.match(word_pattern(w), q)

# One pattern per keyword set, matching exactly when some keyword of the set matches
# (alternation is a union); the per-keyword rules below run only when it does.
write_keywords_pattern := word_pattern(concat("|", sort(write_keywords)))

forbidden_keywords_pattern := word_pattern(concat("|", sort(forbidden_keywords)))

# A call of a denied function: the name as a whole word, then "(" (no "(", no call).
call_pattern(f) := concat("", ["(^|[^a-z0-9_$])(", f, `)[ \t\r\n]*\(`])

denied_functions_pattern := call_pattern(concat("|", sort(denied_functions)))

deny contains denial(module, misconfigured, "sql tool has no sql_args") if {
	applies
	count(sql_args) == 0
}

deny contains denial(module, "a required argument is missing", sprintf("sql argument \"%s\" is missing", [name])) if {
	applies
	some name in sql_args
	not raw[name]
	missing(name)
}

deny contains denial(module, "query is not allowed: it must be a string", sprintf("sql argument \"%s\" is not a string", [name])) if {
	applies
	some name in sql_args
	not raw[name]
	not missing(name)
	not arg_is_string(name)
}

deny contains denial(module, "query is not allowed: it is empty", sprintf("sql argument \"%s\" is empty", [name])) if {
	some name, q in values
	q == ""
}

deny contains denial(module, "query is not allowed: it is too long", sprintf("sql argument \"%s\" is longer than %d characters", [name, max_length])) if {
	some name, q in raw
	is_number(max_length)
	count(q) > max_length
}

deny contains denial(module, "query is not allowed: it contains disallowed characters", sprintf("sql argument \"%s\" contains non-ASCII or control characters (only printable ASCII, tab, CR and LF are allowed)", [name])) if {
	some name, _ in raw
	not values[name]
}

deny contains denial(module, "query is not allowed: SQL comments are not allowed", sprintf("sql argument \"%s\" contains a comment marker (%s)", [name, marker])) if {
	some name, q in values
	some marker in ["--", "/*", "*/", "#"]
	contains(q, marker)
}

deny contains denial(module, "query is not allowed: only a single statement is allowed", sprintf("sql argument \"%s\" contains ';' before its end", [name])) if {
	some name, q in values
	contains(trim_suffix(q, ";"), ";")
}

deny contains denial(module, "query is not allowed: only read-only queries are allowed", sprintf("sql argument \"%s\" does not start with SELECT or WITH", [name])) if {
	some name, q in values
	q != ""
	not writer
	not regex.match(read_starts, q)
}

deny contains denial(module, "query is not allowed: only read-only queries are allowed", sprintf("sql argument \"%s\" contains the data-changing keyword \"%s\"", [name, keyword])) if {
	some name, q in values
	not writer
	regex.match(write_keywords_pattern, q)
	some keyword in write_keywords
	word(q, keyword)
}

deny contains denial(module, "query is not allowed: this kind of statement is not allowed", sprintf("sql argument \"%s\" does not start with SELECT, WITH, INSERT, UPDATE, DELETE or MERGE", [name])) if {
	some name, q in values
	q != ""
	writer
	not regex.match(write_starts, q)
}

deny contains denial(module, "query is not allowed: this kind of statement is not allowed", sprintf("sql argument \"%s\" contains the forbidden keyword \"%s\"", [name, keyword])) if {
	some name, q in values
	regex.match(forbidden_keywords_pattern, q)
	some keyword in forbidden_keywords
	word(q, keyword)
}

deny contains denial(module, "query is not allowed: it calls a function that is not allowed", sprintf("sql argument \"%s\" calls the denied function \"%s\"", [name, f])) if {
	some name, q in values
	contains(q, "(")
	count(denied_functions) > 0
	regex.match(denied_functions_pattern, q)
	some f in denied_functions
	regex.match(call_pattern(f), q)
}
