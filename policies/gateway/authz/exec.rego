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

import data.gateway.authz.lib

module := "exec"

applies if lib.tool.kind == "exec"

command_arg := lib.setting("command_arg", "")

args_arg := lib.setting("args_arg", "")

commands := lib.setting("commands", {}) if {
	is_object(lib.setting("commands", {}))
} else := {}

# Safe characters: a bare command name, and a plain argument token.
command_chars := `^[A-Za-z0-9][A-Za-z0-9._-]*$`

arg_chars := `^[A-Za-z0-9._,:=@+/-]+$`

# The requested command, when it is a string.
command := lib.arguments[command_arg] if {
	applies
	is_string(command_arg)
	is_string(lib.arguments[command_arg])
}

# The allow-list entry of the requested command.
entry := commands[command] if is_object(commands[command])

# The requested arguments: the array argument, or [] when absent.
args := lib.arguments[args_arg] if {
	applies
	is_string(args_arg)
	args_arg != ""
	not lib.missing(args_arg)
} else := [] if {
	applies
}

# The command's argument limit (16 unless the entry sets a number).
max_args := entry.max_args if {
	is_number(entry.max_args)
} else := 16

# arg_allowed(a) holds when entry lists a, or one of its patterns fully matches a.
arg_allowed(a) if a in lib.string_list(entry.args)

arg_allowed(a) if {
	some pattern in lib.string_list(entry.arg_patterns)
	regex.match(concat("", ["^(?:", pattern, ")$"]), a)
}

deny contains lib.denial(module, lib.misconfigured, "exec tool has no command_arg") if {
	applies
	not valid_command_arg
}

valid_command_arg if {
	is_string(command_arg)
	command_arg != ""
}

deny contains lib.denial(module, "a required argument is missing", sprintf("command argument \"%s\" is missing", [command_arg])) if {
	applies
	valid_command_arg
	lib.missing(command_arg)
}

deny contains lib.denial(module, "the command is not allowed", sprintf("command argument \"%s\" is not a string", [command_arg])) if {
	applies
	valid_command_arg
	not lib.missing(command_arg)
	not command
}

deny contains lib.denial(module, "the command contains shell metacharacters or whitespace", sprintf("command argument \"%s\" is not a bare command name", [command_arg])) if {
	cmd := command
	not regex.match(command_chars, cmd)
}

deny contains lib.denial(module, "the command is not allowed", sprintf("command \"%s\" is not in the allow-list", [command])) if {
	regex.match(command_chars, command)
	not entry
}

deny contains lib.denial(module, "the command arguments are malformed", sprintf("argument \"%s\" is not an array", [args_arg])) if {
	value := args
	not is_array(value)
}

deny contains lib.denial(module, "too many command arguments", sprintf("command \"%s\" allows at most %v arguments", [command, max_args])) if {
	is_array(args)
	count(args) > max_args
}

deny contains lib.denial(module, "the command arguments are malformed", sprintf("member %d of argument \"%s\" is not a string", [i, args_arg])) if {
	is_array(args)
	some i, a in args
	not is_string(a)
}

deny contains lib.denial(module, "the command arguments contain shell metacharacters or whitespace", sprintf("member %d of argument \"%s\" has characters outside [A-Za-z0-9._,:=@+/-]", [i, args_arg])) if {
	is_array(args)
	some i, a in args
	is_string(a)
	not regex.match(arg_chars, a)
}

deny contains lib.denial(module, "a command argument is not allowed", sprintf("member %d of argument \"%s\" is not allowed for command \"%s\"", [i, args_arg, command])) if {
	is_array(args)
	entry
	some i, a in args
	is_string(a)
	regex.match(arg_chars, a)
	not arg_allowed(a)
}
