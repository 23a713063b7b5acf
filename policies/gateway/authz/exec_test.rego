package gateway.authz.exec_test

import data.gateway.authz.exec
import data.gateway.authz.fixtures_test as fx

run(command, args) := fx.as_role("operator", "run_command", {"command": command, "args": args})

test_allow_listed_commands_allowed if {
	fx.allowed(run("ls", []))
	fx.allowed(run("ls", ["-la"]))
	fx.allowed(run("ls", ["-l", "-a"]))
	fx.allowed(run("git", ["status"]))
	fx.allowed(run("git", ["log", "--oneline", "-n", "20"]))
	fx.allowed(run("uptime", []))
	fx.allowed(fx.as_role("operator", "run_command", {"command": "uptime"}))
}

test_command_not_allow_listed_denied if {
	every c in ["rm", "bash", "sh", "python3", "curl", "LS", "ls.exe", "git-shell"] {
		d := run(c, [])
		d.message == "the command is not allowed"
		fx.has_reason(d, "is not in the allow-list")
	}
}

test_command_metacharacters_denied if {
	every c in [
		"ls; rm -rf /",
		"ls && id",
		"ls | sh",
		"$(id)",
		"`id`",
		"ls -la",
		"/bin/ls",
		"./ls",
		"../bin/ls",
		"ls\n",
		"ls\u0000",
		"l\u0455", # Cyrillic dze
		"",
		"-ls",
		"ls>out",
		"ls*",
	] {
		d := run(c, [])
		d.message == "the command contains shell metacharacters or whitespace"
		fx.has_reason(d, "is not a bare command name")
	}
}

test_argument_metacharacters_denied if {
	every a in [
		"-la; rm -rf /",
		"$(id)",
		"`id`",
		"a|b",
		"a&b",
		"a>b",
		"a<b",
		"*",
		"?",
		"~",
		"'x'",
		"\"x\"",
		"a b",
		"a\nb",
		"a\\b",
		"{a,b}",
		"!1",
		"",
		"\u2013la", # en dash
	] {
		d := run("ls", [a])
		d.message == "the command arguments contain shell metacharacters or whitespace"
		fx.has_reason(d, "has characters outside [A-Za-z0-9._,:=@+/-]")
	}
}

test_argument_not_allow_listed_denied if {
	every a in ["-R", "/etc", "--color=always", "-l-a", "-laR"] {
		d := run("ls", [a])
		d.message == "a command argument is not allowed"
		fx.has_reason(d, "member 0 of argument \"args\" is not allowed for command \"ls\"")
	}
}

test_argument_allowed_for_other_command_denied if {
	d := run("ls", ["status"])
	d.message == "a command argument is not allowed"
	d2 := run("uptime", ["-l"])
	fx.has_message(d2, "a command argument is not allowed")
}

test_argument_patterns_are_anchored if {
	every a in ["1234", "20x", "x20", "--exec=sh", "-c"] {
		d := run("git", ["log", a])
		d.allow == false
	}
}

test_too_many_arguments_denied if {
	d := run("ls", ["-l", "-a", "-la"])
	d.message == "too many command arguments"
	fx.has_reason(d, "command \"ls\" allows at most 2 arguments")
	d2 := run("uptime", ["-p"])
	fx.has_message(d2, "too many command arguments")
}

test_non_string_arguments_denied if {
	every a in [1, true, null, ["-l"], {"flag": "-l"}] {
		d := run("ls", [a])
		d.message == "the command arguments are malformed"
		fx.has_reason(d, "member 0 of argument \"args\" is not a string")
	}
}

test_non_array_arguments_denied if {
	every args in ["-la", {"0": "-la"}, 1] {
		d := run("ls", args)
		d.message == "the command arguments are malformed"
		fx.has_reason(d, "argument \"args\" is not an array")
	}
}

test_null_arguments_mean_none if {
	fx.allowed(run("ls", null))
}

test_non_string_command_denied if {
	every c in [["ls"], {"cmd": "ls"}, 1, true] {
		d := run(c, [])
		d.message == "the command is not allowed"
		fx.has_reason(d, "command argument \"command\" is not a string")
	}
}

test_missing_command_denied if {
	d := fx.as_role("operator", "run_command", {"args": ["-l"]})
	d.message == "a required argument is missing"
	fx.has_reason(d, "exec: command argument \"command\" is missing")
}

test_missing_command_arg_is_misconfiguration if {
	every bad in [null, "", 5] {
		d := run("ls", []) with data.gateway.config.tools.run_command.command_arg as bad
		d.message == "this tool is not configured correctly"
		fx.has_reason(d, "exec: exec tool has no command_arg")
	}
}

test_no_args_arg_means_no_arguments if {
	exec.args == [] with input as fx.request("run_command", {"command": "ls", "args": ["-R"]}, fx.context(["operator"], "acme"))
		with data.gateway.config.tools.run_command.args_arg as null
}

test_malformed_commands_setting_denies_everything if {
	d := run("ls", []) with data.gateway.config.tools.run_command.commands as ["ls"]
	d.message == "the command is not allowed"
}

test_default_max_args if {
	exec.max_args == 16 with input as fx.request("run_command", {"command": "ls"}, fx.context(["operator"], "acme"))
		with data.gateway.config.tools.run_command.commands.ls.max_args as null
}

test_exec_rules_do_not_apply_to_other_tools if {
	count(exec.deny) == 0 with input as fx.request("add", {"command": "rm -rf /", "args": "x"}, fx.context(["reader"], "acme"))
	not exec.args with input as fx.request("add", {}, fx.context(["reader"], "acme"))
}
