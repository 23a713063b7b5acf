# METADATA
# title: Command execution allow-list
# description: |
#   For tools of kind "exec", the argument named by "command_arg" must be a
#   bare command name listed in "commands", and every member of the array
#   argument named by "args_arg" (absent means no arguments) must be listed in
#   that command's "args" or fully match one of its "arg_patterns", with at
#   most "max_args" members. Shell metacharacters, whitespace and non-ASCII
#   characters are refused in the command and in every argument.
package gateway.authz.exec

import data.gateway.authz.lib.arguments
import data.gateway.authz.lib.denial
import data.gateway.authz.lib.misconfigured
import data.gateway.authz.lib.missing
import data.gateway.authz.lib.setting
import data.gateway.authz.lib.string_list
import data.gateway.authz.lib.tool

module := "exec"

applies if tool.kind == "exec"

command_arg := setting("command_arg", "")

args_arg := setting("args_arg", "")

# For the policy gate (gate.rego): the settings that name arguments (no args_arg means
# no command arguments, so it is optional).
gate_settings := {
	"command_arg": {"names": "one", "types": ["string"], "required": true},
	"args_arg": {"names": "one", "types": ["array"], "required": false},
}

commands_setting := setting("commands", {})

commands := commands_setting if {
	is_object(commands_setting)
} else := {}

# Safe characters: a bare command name, and a plain argument token.
command_chars := `^[A-Za-z0-9][A-Za-z0-9._-]*$`

arg_chars := `^[A-Za-z0-9._,:=@+/-]+$`

# The requested command, when it is a string.
command := arguments[command_arg] if {
	applies
	is_string(command_arg)
	is_string(arguments[command_arg])
}

# The allow-list entry of the requested command.
entry := commands[command] if is_object(commands[command])

# The requested arguments: the array argument, or [] when absent.
args := arguments[args_arg] if {
	applies
	is_string(args_arg)
	args_arg != ""
	not missing(args_arg)
} else := [] if {
	applies
}

# The requested command, when it is a bare command name.
bare_command := command if regex.match(command_chars, command)

# The members of the arguments array that are plain tokens (strings of arg_chars), by index.
plain_args[i] := a if {
	is_array(args)
	some i, a in args
	is_string(a)
	regex.match(arg_chars, a)
}

# The command's argument limit (16 unless the entry sets a number).
max_args := entry.max_args if {
	is_number(entry.max_args)
} else := 16

# The entry's allowed arguments, and its patterns anchored to match whole arguments.
allowed_args := string_list(entry.args)

anchored_patterns := [concat("", ["^(?:", pattern, ")$"]) | some pattern in string_list(entry.arg_patterns)]

# arg_allowed(a) holds when entry lists a, or one of its patterns fully matches a.
arg_allowed(a) if a in allowed_args

arg_allowed(a) if {
	some pattern in anchored_patterns
	regex.match(pattern, a)
}

valid_command_arg if {
	is_string(command_arg)
	command_arg != ""
}

deny contains denial(module, misconfigured, "exec tool has no command_arg") if {
	applies
	not valid_command_arg
}

deny contains denial(module, "a required argument is missing", sprintf("command argument \"%s\" is missing", [command_arg])) if {
	applies
	valid_command_arg
	missing(command_arg)
}

deny contains denial(module, "the command is not allowed", sprintf("command argument \"%s\" is not a string", [command_arg])) if {
	applies
	valid_command_arg
	not command
	not missing(command_arg)
}

deny contains denial(module, "the command contains shell metacharacters or whitespace", sprintf("command argument \"%s\" is not a bare command name", [command_arg])) if {
	command
	not bare_command
}

deny contains denial(module, "the command is not allowed", sprintf("command \"%s\" is not in the allow-list", [command])) if {
	bare_command
	not entry
}

deny contains denial(module, "the command arguments are malformed", sprintf("argument \"%s\" is not an array", [args_arg])) if {
	# Bound before the negation (policies/README.md, "Writing rules that run on both engines").
	value := args # regal ignore:pointless-reassignment
	not is_array(value)
}

deny contains denial(module, "too many command arguments", sprintf("command \"%s\" allows at most %v arguments", [command, max_args])) if {
	is_array(args)
	count(args) > max_args
}

deny contains denial(module, "the command arguments are malformed", sprintf("member %d of argument \"%s\" is not a string", [i, args_arg])) if {
	is_array(args)
	some i, a in args
	not is_string(a)
}

deny contains denial(module, "the command arguments contain shell metacharacters or whitespace", sprintf("member %d of argument \"%s\" has characters outside [A-Za-z0-9._,:=@+/-]", [i, args_arg])) if {
	is_array(args)
	some i, a in args
	is_string(a)
	not plain_args[i]
}

deny contains denial(module, "a command argument is not allowed", sprintf("member %d of argument \"%s\" is not allowed for command \"%s\"", [i, args_arg, command])) if {
	entry
	some i, a in plain_args
	not arg_allowed(a)
}
