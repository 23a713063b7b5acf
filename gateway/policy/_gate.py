"""A static policy gate: every served tool has a decision path whose settings match its schema."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from gateway._definition import ToolDefinition
from gateway.policy._facts import SQL_MEDIA_TYPE, sql_locations

Severity = Literal["error", "warning"]

#: Tool kinds the shipped library constrains (``rbac.kinds`` in ``rbac.rego``).
KINDS: Final = frozenset({"filesystem", "url", "sql", "exec", "payment", "generic"})

# Settings that hold a list of argument names, the kind they apply to (None: every kind),
# and whether the kind requires at least one.
_NAME_LISTS: Final[tuple[tuple[str, str | None, bool], ...]] = (
    ("tenant_args", None, False),
    ("path_args", "filesystem", True),
    ("url_args", "url", True),
    ("sql_args", "sql", True),
)
# Settings that hold one argument name, their kind, and whether the kind requires them.
_NAME_SINGLES: Final[tuple[tuple[str, str, bool], ...]] = (
    ("command_arg", "exec", True),
    ("args_arg", "exec", False),
)
# The JSON type a configured argument must be able to take, by setting.
_ARGUMENT_TYPES: Final[Mapping[str, frozenset[str]]] = {
    "tenant_args": frozenset({"string"}),
    "resource_args": frozenset({"string"}),
    "path_args": frozenset({"string"}),
    "url_args": frozenset({"string"}),
    "sql_args": frozenset({"string"}),
    "command_arg": frozenset({"string"}),
    "args_arg": frozenset({"array"}),
    "limits": frozenset({"number", "integer"}),
}
_DENY_ALL: Final = "every call is denied"


@dataclass(frozen=True, slots=True)
class GateProblem:
    """One finding of the policy gate.

    Attributes:
        tool: the tool name the finding is about.
        problem: what is wrong and what it does to calls, for an operator.
        severity: ``"error"`` (the tool cannot be called as intended, or a check is
            silently skipped) or ``"warning"`` (suspicious but harmless to decisions).
    """

    tool: str
    problem: str
    severity: Severity = "error"


def check_policy_coverage(
    definitions: Iterable[ToolDefinition], data: Mapping[str, Any]
) -> list[GateProblem]:
    """Check that every served tool has a decision path in the shipped policy library.

    Reads ``data["gateway"]["config"]`` as documented in ``policies/README.md`` and reports,
    for each served tool: no settings in ``tools`` or an unknown ``kind`` (always denied);
    no role granting it (always denied); a setting that names an argument the input schema
    does not declare as a property, or declares with a type the setting cannot accept
    (every call denied); a malformed or missing required setting; a resource kind or limit
    key that nothing configures; an argument in ``sql_args`` whose schema property is not
    marked ``"contentMediaType": "application/sql"`` (the gateway gives the policy no
    parser facts for it, so every call is denied). Warnings: a configured argument the
    schema does not require, a setting the tool's kind ignores, and settings for a tool that
    is not served.

    Schema properties are read from the top-level ``properties`` and ``required`` of the
    input schema and of the members of a top-level ``allOf``. A setting that is absent or
    ``null`` takes its default, as in the policies.

    Args:
        definitions: the tools the gateway serves.
        data: the policy data document (the contents of ``data.json``).

    Returns:
        The problems, per served tool in the order given, then the unserved configured
        tools in name order. Empty when the configuration is sound.
    """
    config = _object(_object(data.get("gateway")).get("config"))
    tools = _object(config.get("tools"))
    roles = _object(config.get("roles"))
    resources = _object(config.get("resources"))
    problems: list[GateProblem] = []
    served: dict[str, ToolDefinition] = {}
    for definition in definitions:
        served.setdefault(definition.name, definition)
    for name, definition in served.items():
        checker = _ToolCheck(name, definition, tools.get(name), roles, resources)
        problems.extend(checker.run())
    for name in sorted(set(tools) - set(served)):
        problems.append(
            GateProblem(
                name,
                "has settings in data.gateway.config.tools but no served tool has this name",
                "warning",
            )
        )
    return problems


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _granting_roles(tool: str, roles: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    granting: list[Mapping[str, Any]] = []
    for definition in roles.values():
        if not isinstance(definition, Mapping):
            continue
        listed = definition.get("tools")
        if isinstance(listed, list) and tool in listed:
            granting.append(definition)
    return granting


def _setting(settings: Mapping[str, Any], name: str) -> Any:
    # As lib.setting: absent and null both mean "use the default".
    return settings.get(name)


def _string_list(value: Any) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    return list(value)


class _Schema:
    """The argument names an input schema declares, and the ones it requires."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        parts = [schema]
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            parts += [part for part in all_of if isinstance(part, Mapping)]
        self.properties: dict[str, Any] = {}
        self.required: set[str] = set()
        for part in parts:
            self.properties.update(_object(part.get("properties")))
            listed = part.get("required")
            if isinstance(listed, list):
                self.required.update(item for item in listed if isinstance(item, str))

    def types(self, name: str) -> frozenset[str] | None:
        """The JSON types the property may take; None when unconstrained."""
        prop = self.properties[name]
        if prop is False:
            return frozenset()
        if not isinstance(prop, Mapping):
            return None
        declared = prop.get("type")
        if isinstance(declared, str):
            return frozenset({declared})
        if isinstance(declared, list):
            return frozenset(item for item in declared if isinstance(item, str))
        return None


class _ToolCheck:
    """The checks for one served tool."""

    def __init__(
        self,
        name: str,
        definition: ToolDefinition,
        settings: Any,
        roles: Mapping[str, Any],
        resources: Mapping[str, Any],
    ) -> None:
        self.name = name
        self.schema = _Schema(definition.input_schema)
        self.sql_marked = {loc[0] for loc in sql_locations(definition) if len(loc) == 1}
        self.settings = settings
        self.roles = roles
        self.granting = _granting_roles(name, roles)
        self.resources = resources

    def error(self, problem: str) -> GateProblem:
        return GateProblem(self.name, problem, "error")

    def warning(self, problem: str) -> GateProblem:
        return GateProblem(self.name, problem, "warning")

    def run(self) -> Iterator[GateProblem]:
        settings = self.settings
        if not isinstance(settings, Mapping):
            yield self.error(
                "has no settings (an object) in data.gateway.config.tools: "
                f'{_DENY_ALL} ("this tool is not available")'
            )
            if not self.granting:
                yield self.error(f"no role in data.gateway.config.roles grants it: {_DENY_ALL}")
            return
        kind = settings.get("kind")
        if not _known_kind(kind):
            yield self.error(
                f"kind {kind!r} is not one of {', '.join(sorted(KINDS))}: "
                f'{_DENY_ALL} ("this tool is not available")'
            )
        if not self.granting:
            yield self.error(f"no role in data.gateway.config.roles grants it: {_DENY_ALL}")
        yield from self._name_lists(settings, kind)
        yield from self._name_singles(settings, kind)
        yield from self._resource_args(settings)
        yield from self._limits(settings, kind)
        if kind == "filesystem":
            roots = _string_list(_setting(settings, "roots"))
            if not roots or not any(root.startswith("/") for root in roots):
                yield self.error(f"setting roots holds no absolute directory: {_DENY_ALL}")

    def _argument(
        self, setting: str, argument: str, *, must_require: bool = True
    ) -> Iterator[GateProblem]:
        if argument not in self.schema.properties:
            yield self.error(
                f"setting {setting} names argument {argument!r}, which is not a property of "
                f"the input schema: {_DENY_ALL}"
            )
            return
        types = self.schema.types(argument)
        wanted = _ARGUMENT_TYPES[setting]
        if types is not None and not types & wanted:
            yield self.error(
                f"setting {setting} names argument {argument!r}, whose schema type "
                f"({', '.join(sorted(types)) or 'none'}) is not {' or '.join(sorted(wanted))}: "
                f"{_DENY_ALL}"
            )
        if must_require and argument not in self.schema.required:
            yield self.warning(
                f"argument {argument!r} (setting {setting}) is not required by the input "
                "schema: a call without it is denied"
            )

    def _name_lists(self, settings: Mapping[str, Any], kind: Any) -> Iterator[GateProblem]:
        for setting, applies_to, required in _NAME_LISTS:
            value = _setting(settings, setting)
            if applies_to is not None and kind != applies_to:
                if value is not None and _known_kind(kind):
                    yield self.warning(f"setting {setting} is ignored for kind {kind!r}")
                continue
            if value is None:
                if required:
                    yield self.error(f"kind {kind!r} requires setting {setting}: {_DENY_ALL}")
                continue
            names = _string_list(value)
            if names is None:
                yield self.error(
                    f"setting {setting} is not an array of argument names (strings): the "
                    "policies ignore it, or its members that are not strings"
                )
                continue
            if required and not names:
                yield self.error(f"setting {setting} is empty: {_DENY_ALL}")
            for argument in names:
                yield from self._argument(setting, argument)
                if setting == "sql_args" and argument in self.schema.properties:
                    yield from self._sql_marker(argument)

    def _sql_marker(self, argument: str) -> Iterator[GateProblem]:
        if argument not in self.sql_marked:
            yield self.error(
                f"setting sql_args names argument {argument!r}, whose schema property is not "
                f'marked "contentMediaType": "{SQL_MEDIA_TYPE}": the gateway gives the policy '
                f"no parser facts for it, so {_DENY_ALL}"
            )

    def _name_singles(self, settings: Mapping[str, Any], kind: Any) -> Iterator[GateProblem]:
        for setting, applies_to, required in _NAME_SINGLES:
            value = _setting(settings, setting)
            if kind != applies_to:
                if value is not None and _known_kind(kind):
                    yield self.warning(f"setting {setting} is ignored for kind {kind!r}")
                continue
            if value is None or value == "":
                if required:
                    yield self.error(f"kind {kind!r} requires setting {setting}: {_DENY_ALL}")
                continue
            if not isinstance(value, str):
                consequence = (
                    _DENY_ALL
                    if required
                    else "the policies ignore it, so the command arguments are never checked"
                )
                yield self.error(f"setting {setting} is not an argument name: {consequence}")
                continue
            yield from self._argument(setting, value, must_require=required)

    def _resource_args(self, settings: Mapping[str, Any]) -> Iterator[GateProblem]:
        value = _setting(settings, "resource_args")
        if value is None:
            return
        if not isinstance(value, Mapping):
            yield self.error(
                f"setting resource_args is not an object of argument -> resource kind: {_DENY_ALL}"
            )
            return
        for argument, resource_kind in value.items():
            if not isinstance(resource_kind, str) or not isinstance(
                self.resources.get(resource_kind), Mapping
            ):
                yield self.error(
                    f"setting resource_args maps argument {argument!r} to resource kind "
                    f"{resource_kind!r}, which data.gateway.config.resources does not "
                    f"configure: {_DENY_ALL}"
                )
            yield from self._argument("resource_args", argument)

    def _limits(self, settings: Mapping[str, Any], kind: Any) -> Iterator[GateProblem]:
        value = _setting(settings, "limits")
        if value is None:
            if kind == "payment":
                yield self.error(f"kind 'payment' requires setting limits: {_DENY_ALL}")
            return
        if not isinstance(value, list):
            yield self.error(f"setting limits is not an array: {_DENY_ALL}")
            return
        if kind == "payment" and not value:
            yield self.error(f"setting limits is empty: {_DENY_ALL}")
        for index, spec in enumerate(value):
            if not _valid_limit(spec):
                yield self.error(
                    f"setting limits member {index} is not an {{arg, limit, min}} object: "
                    f"{_DENY_ALL}"
                )
                continue
            yield from self._argument("limits", spec["arg"])
            key = spec["limit"]
            if not any(_defines_limit(role, key) for role in self.roles.values()):
                yield self.error(
                    f"limit {key!r} (argument {spec['arg']!r}) is defined by no role: {_DENY_ALL}"
                )
            elif self.granting and not any(_defines_limit(role, key) for role in self.granting):
                yield self.warning(
                    f"limit {key!r} (argument {spec['arg']!r}) is defined by no role that "
                    "grants the tool: only callers who also hold another role can call it"
                )


def _known_kind(kind: Any) -> bool:
    return isinstance(kind, str) and kind in KINDS


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _valid_limit(spec: Any) -> bool:
    # As limits.valid_spec; an explicit "min": null is malformed there too.
    return (
        isinstance(spec, Mapping)
        and isinstance(spec.get("arg"), str)
        and isinstance(spec.get("limit"), str)
        and _is_number(spec.get("min", 0))
    )


def _defines_limit(role: Any, key: str) -> bool:
    limits = role.get("limits") if isinstance(role, Mapping) else None
    return isinstance(limits, Mapping) and _is_number(limits.get(key))
