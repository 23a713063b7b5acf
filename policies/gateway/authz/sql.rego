# METADATA
# title: SQL restrictions
# description: |
#   For tools of kind "sql", every argument listed in "sql_args" is decided on
#   what PostgreSQL's own parser found in it (input.facts, see README.md),
#   never on its text. It must parse, hold exactly one statement and call only
#   functions in "allowed_functions" (none by default) and none in
#   "denied_functions". Unless one of the caller's roles lists the tool in
#   "sql_write_tools", the statement must be a SELECT that writes nothing (no
#   data-modifying CTE, SELECT INTO or row lock); writers may also INSERT,
#   UPDATE, DELETE and MERGE. Any parse node outside the known constructs (DDL,
#   COPY, DO, CALL, SET, EXPLAIN, transaction control, XML, ...) is refused.
package gateway.authz.sql

import data.gateway.authz.lib.arg_is_string
import data.gateway.authz.lib.argument_facts
import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.caller_role_defs
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.pointer
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tool
import data.gateway.authz.lib.tool_name

module := "sql"

applies if tool.kind == "sql"

sql_args := string_list(setting("sql_args", []))

# For the policy gate (gate.rego): the settings that name arguments. The gateway parses
# only the arguments whose schema property is marked as SQL, so an unmarked one gets no
# facts and every call is denied.
gate_settings := {"sql_args": {
	"names": "list", "types": ["string"], "required": true,
	"facts": "sql", "facts_hint": "its schema property is not marked \"contentMediaType\": \"application/sql\"",
}}

max_length := setting("max_length", 10000)

# The parse nodes of a read-only SELECT (PostgreSQL's parse node names).
read_node_types := {
	"A_ArrayExpr", "A_Const", "A_Expr", "A_Indices", "A_Indirection", "A_Star",
	"Alias", "BitString", "BoolExpr", "Boolean", "BooleanTest", "CTECycleClause",
	"CTESearchClause", "CaseExpr", "CaseWhen", "CoalesceExpr", "CollateClause",
	"ColumnRef", "CommonTableExpr", "Float", "FuncCall", "GroupingFunc",
	"GroupingSet", "Integer", "JoinExpr", "MinMaxExpr", "NullTest", "ParamRef",
	"RangeFunction", "RangeSubselect", "RangeTableSample", "RangeVar", "ResTarget",
	"RowExpr", "SQLValueFunction", "SelectStmt", "SortBy", "String", "SubLink",
	"TypeCast", "TypeName", "WindowDef", "WithClause",
}

# The parse nodes that change data or lock rows; the "writes" fact covers them for readers.
write_only_node_types := {
	"DeleteStmt", "IndexElem", "InferClause", "InsertStmt", "LockingClause",
	"MergeStmt", "MergeWhenClause", "MultiAssignRef", "OnConflictClause",
	"ReturningClause", "ReturningOption", "SetToDefault", "UpdateStmt",
}

# PostgreSQL's built-in operators a query may use (and the grammar's BETWEEN forms);
# the "allowed_operators" setting adds to them.
builtin_operators := {
	"!~", "!~*", "!~~", "!~~*", "#", "#>", "#>>", "%", "&", "&&", "*", "+", "-",
	"->", "->>", "/", "<", "<<", "<=", "<>", "<@", "=", ">", ">=", ">>", "?",
	"?&", "?|", "@>", "^", "|", "||", "~", "~*", "~~", "~~*",
	"BETWEEN", "BETWEEN SYMMETRIC", "NOT BETWEEN", "NOT BETWEEN SYMMETRIC",
}

allowed_operators := builtin_operators | {o | some o in string_list(setting("allowed_operators", []))}

# The parse nodes that make the "writes" fact true, which has its own denial for readers.
writing_node_types := write_only_node_types | {"IntoClause"}

# Statements a writer may run.
write_statements := {"DeleteStmt", "InsertStmt", "MergeStmt", "SelectStmt", "UpdateStmt"}

# The caller may write through this tool.
writer if {
	some def in caller_role_defs
	tool_name in string_list(def.sql_write_tools)
}

allowed_functions := {f | some f in string_list(setting("allowed_functions", []))}

denied_functions := {f | some f in string_list(setting("denied_functions", []))}

# Parse nodes the tool's settings add to the known ones.
extra_node_types := {t | some t in string_list(setting("allowed_node_types", []))}

known_node_types := (read_node_types | write_only_node_types) | extra_node_types if {
	writer
} else := read_node_types | extra_node_types

# The string-valued SQL arguments, by argument name.
raw[name] := q if {
	applies
	some name in sql_args
	q := arguments[name]
	is_string(q)
}

# The parser's facts about each string-valued SQL argument, by argument name.
facts[name] := f if {
	some name, _ in raw
	f := argument_facts[pointer(name)].sql
	is_object(f)
}

# The facts of the arguments that parsed, in the documented shape.
parsed[name] := f if {
	some name, f in facts
	f.parsed == true
	is_array(f.statements)
	is_array(f.functions)
	is_array(f.locking)
	is_array(f.node_types)
	is_array(f.operators)
	is_boolean(f.writes)
}

# The operators used, by argument name.
operators[name] := [op | some op in f.operators; is_object(op)] if {
	some name, f in parsed
	is_array(f.operators)
}

# operator_allowed(op) holds for an allowed operator: unqualified or in pg_catalog, or
# listed as "schema.op".
operator_allowed(op) if {
	op.schema == null
	op.name in allowed_operators
}

operator_allowed(op) if {
	op.schema == "pg_catalog"
	op.name in allowed_operators
}

operator_allowed(op) if {
	is_string(op.schema)
	is_string(op.name)
	concat(".", [op.schema, op.name]) in allowed_operators
}

# The functions called, by argument name.
functions[name] := [fn | some fn in f.functions; is_object(fn)] if {
	some name, f in parsed
}

# function_allowed(fn) holds when the allow-list names the function: by its name when
# it is unqualified or in pg_catalog, or as "schema.name".
function_allowed(fn) if {
	fn.catalog == null
	fn.schema == null
	fn.name in allowed_functions
}

function_allowed(fn) if {
	fn.catalog == null
	fn.schema == "pg_catalog"
	fn.name in allowed_functions
}

function_allowed(fn) if {
	fn.catalog == null
	is_string(fn.schema)
	is_string(fn.name)
	concat(".", [fn.schema, fn.name]) in allowed_functions
}

# names_function(entry, fn) holds when a deny-list entry names the function: by its
# name in any schema, or as "schema.name".
names_function(entry, fn) if entry == fn.name

names_function(entry, fn) if {
	is_string(fn.schema)
	is_string(fn.name)
	entry == concat(".", [fn.schema, fn.name])
}

# An unqualified name resolves to pg_catalog first, so "pg_catalog.f" denies f too.
names_function(entry, fn) if {
	fn.schema == null
	is_string(fn.name)
	entry == concat(".", ["pg_catalog", fn.name])
}

# error_category(f) is the parser's error category ("syntax", "nul", "too_long", ...).
error_category(f) := f.error if {
	is_string(f.error)
} else := "malformed facts"

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

deny contains denial(module, "query is not allowed: it is too long", sprintf("sql argument \"%s\" is longer than %d characters", [name, max_length])) if {
	is_number(max_length)
	some name, q in raw
	count(q) > max_length
}

deny contains denial(module, misconfigured, sprintf("sql argument \"%s\" has no parser facts: mark its schema property with contentMediaType \"application/sql\"", [name])) if {
	some name, _ in raw
	not facts[name]
}

deny contains denial(module, "query is not allowed: it is not valid SQL", sprintf("sql argument \"%s\" does not parse as PostgreSQL (%s)", [name, error])) if {
	some name, f in facts
	not parsed[name]
	error := error_category(f)
}

deny contains denial(module, "query is not allowed: it is empty", sprintf("sql argument \"%s\" holds no statement", [name])) if {
	some name, f in parsed
	count(f.statements) == 0
}

deny contains denial(module, "query is not allowed: only a single statement is allowed", sprintf("sql argument \"%s\" holds %d statements", [name, count(f.statements)])) if {
	some name, f in parsed
	count(f.statements) > 1
}

deny contains denial(module, "query is not allowed: only read-only queries are allowed", sprintf("sql argument \"%s\" is a %s, not a SelectStmt", [name, kind])) if {
	some name, f in parsed
	not writer
	some kind in f.statements
	kind != "SelectStmt"
}

deny contains denial(module, "query is not allowed: only read-only queries are allowed", sprintf("sql argument \"%s\" writes (a data-modifying statement, SELECT INTO or a row lock)", [name])) if {
	some name, f in parsed
	not writer
	f.writes == true
}

deny contains denial(module, "query is not allowed: this kind of statement is not allowed", sprintf("sql argument \"%s\" is a %s", [name, kind])) if {
	some name, f in parsed
	writer
	some kind in f.statements
	not kind in write_statements
}

deny contains denial(module, "query is not allowed: it uses a construct that is not allowed", sprintf("sql argument \"%s\" uses parse nodes outside the known constructs: %s", [name, concat(", ", sort(unknown))])) if {
	some name, f in parsed
	not writer
	unknown := (({t | some t in f.node_types} - known_node_types) - writing_node_types) - {k | some k in f.statements}
	count(unknown) > 0
}

deny contains denial(module, "query is not allowed: it uses a construct that is not allowed", sprintf("sql argument \"%s\" uses parse nodes outside the known constructs: %s", [name, concat(", ", sort(unknown))])) if {
	some name, f in parsed
	writer
	unknown := ({t | some t in f.node_types} - known_node_types) - {k | some k in f.statements}
	count(unknown) > 0
}

deny contains denial(module, "query is not allowed: it calls a function that is not allowed", sprintf("sql argument \"%s\" calls %d function(s) not in allowed_functions", [name, count(unlisted)])) if {
	some name, fns in functions
	unlisted := [fn | some fn in fns; not function_allowed(fn)]
	count(unlisted) > 0
}

deny contains denial(module, "query is not allowed: it calls a function that is not allowed", sprintf("sql argument \"%s\" calls the denied function \"%s\"", [name, entry])) if {
	count(denied_functions) > 0
	some name, fns in functions
	some fn in fns
	some entry in denied_functions
	names_function(entry, fn)
}

deny contains denial(module, "query is not allowed: it uses an operator that is not allowed", sprintf("sql argument \"%s\" uses %d operator(s) outside the built-in ones and allowed_operators", [name, count(unlisted)])) if {
	some name, ops in operators
	unlisted := [op | some op in ops; not operator_allowed(op)]
	count(unlisted) > 0
}

deny contains denial(module, "query is not allowed: a backslash in a '...' string is ambiguous (write E'...')", sprintf("sql argument \"%s\" has a backslash in a standard string literal", [name])) if {
	some name, f in parsed
	f.backslash_in_string == true
}
