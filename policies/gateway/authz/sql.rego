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

import data.gateway.authz.lib

module := "sql"

applies if lib.tool.kind == "sql"

sql_args := lib.string_list(lib.setting("sql_args", []))

max_length := lib.setting("max_length", 10000)

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
	some def in lib.caller_role_defs
	lib.tool_name in lib.string_list(def.sql_write_tools)
}

# Function names from settings that are plain identifiers (safe inside a regex).
denied_functions := {lower(f) |
	some f in lib.string_list(lib.setting("denied_functions", []))
	regex.match(`^[A-Za-z_][A-Za-z0-9_]*$`, f)
}

# The string-valued SQL arguments, by argument name.
raw[name] := q if {
	applies
	some name in sql_args
	q := lib.arguments[name]
	is_string(q)
}

# Printable-ASCII queries (tab, CR and LF allowed), lowercased and trimmed, by argument name.
# Only these are inspected further, so case mapping and trimming never see non-ASCII text.
values[name] := trim_space(lower(q)) if {
	some name, q in raw
	regex.match(`^[\t\n\r\x20-\x7E]*$`, q)
}

# word(q, w) holds when q contains w as a whole word.
word(q, w) if regex.match(concat("", ["(^|[^a-z0-9_$])", w, "([^a-z0-9_$]|$)"]), q)

deny contains lib.denial(module, lib.misconfigured, "sql tool has no sql_args") if {
	applies
	count(sql_args) == 0
}

deny contains lib.denial(module, "a required argument is missing", sprintf("sql argument \"%s\" is missing", [name])) if {
	applies
	some name in sql_args
	lib.missing(name)
}

deny contains lib.denial(module, "query is not allowed: it must be a string", sprintf("sql argument \"%s\" is not a string", [name])) if {
	applies
	some name in sql_args
	not lib.missing(name)
	not lib.arg_is_string(name)
}

deny contains lib.denial(module, "query is not allowed: it is empty", sprintf("sql argument \"%s\" is empty", [name])) if {
	some name, q in values
	q == ""
}

deny contains lib.denial(module, "query is not allowed: it is too long", sprintf("sql argument \"%s\" is longer than %d characters", [name, max_length])) if {
	some name, q in raw
	is_number(max_length)
	count(q) > max_length
}

deny contains lib.denial(module, "query is not allowed: it contains disallowed characters", sprintf("sql argument \"%s\" contains non-ASCII or control characters (only printable ASCII, tab, CR and LF are allowed)", [name])) if {
	some name, _ in raw
	not values[name]
}

deny contains lib.denial(module, "query is not allowed: SQL comments are not allowed", sprintf("sql argument \"%s\" contains a comment marker (%s)", [name, marker])) if {
	some name, q in values
	some marker in ["--", "/*", "*/", "#"]
	contains(q, marker)
}

deny contains lib.denial(module, "query is not allowed: only a single statement is allowed", sprintf("sql argument \"%s\" contains ';' before its end", [name])) if {
	some name, q in values
	contains(trim_suffix(q, ";"), ";")
}

deny contains lib.denial(module, "query is not allowed: only read-only queries are allowed", sprintf("sql argument \"%s\" does not start with SELECT or WITH", [name])) if {
	some name, q in values
	q != ""
	not writer
	not regex.match(read_starts, q)
}

deny contains lib.denial(module, "query is not allowed: only read-only queries are allowed", sprintf("sql argument \"%s\" contains the data-changing keyword \"%s\"", [name, keyword])) if {
	some name, q in values
	not writer
	some keyword in write_keywords
	word(q, keyword)
}

deny contains lib.denial(module, "query is not allowed: this kind of statement is not allowed", sprintf("sql argument \"%s\" does not start with SELECT, WITH, INSERT, UPDATE, DELETE or MERGE", [name])) if {
	some name, q in values
	q != ""
	writer
	not regex.match(write_starts, q)
}

deny contains lib.denial(module, "query is not allowed: this kind of statement is not allowed", sprintf("sql argument \"%s\" contains the forbidden keyword \"%s\"", [name, keyword])) if {
	some name, q in values
	some keyword in forbidden_keywords
	word(q, keyword)
}

deny contains lib.denial(module, "query is not allowed: it calls a function that is not allowed", sprintf("sql argument \"%s\" calls the denied function \"%s\"", [name, f])) if {
	some name, q in values
	some f in denied_functions
	regex.match(concat("", ["(^|[^a-z0-9_$])", f, `[ \t\r\n]*\(`]), q)
}
