"""OPA's WebAssembly ABI (1.2 and later) on wasmtime, called through wasmtime's C API.

wasmtime-py's generic ``Func.__call__`` converts every argument and result through Python
objects; an evaluation here is one ``opa_eval`` call through ``wasmtime_func_call_unchecked``
with a preallocated argument buffer, the input bytes copied straight into linear memory and
the result read back as the C string ``opa_eval`` returns. Host builtins are raw callbacks
(``wasmtime_func_new_unchecked``). A store and its instance are single-threaded: each thread
gets its own :class:`PolicyInstance` from the same :class:`CompiledPolicy`.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import math
import re
import struct
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import wasmtime
from wasmtime import _ffi as ffi

from gateway import _json
from gateway.policy import _rego_value
from gateway.policy._sprintf import sprintf

#: The ABI this host speaks: major 1, minor 2 or later (``opa_eval``).
ABI_MAJOR: Final = 1
ABI_MIN_MINOR: Final = 2
_PAGE: Final = 65536
_MAX_DETAIL: Final = 300
#: opa_eval's output format: 1 prints Rego values (sets stay sets).
_FORMAT_VALUE: Final = 1
_BUILTIN_IMPORTS: Final = frozenset(f"opa_builtin{n}" for n in range(5))
_KNOWN_IMPORTS: Final = _BUILTIN_IMPORTS | {"memory", "opa_abort", "opa_println"}
_INTERRUPT: Final = ffi.wasmtime_trap_code_enum.WASMTIME_TRAP_CODE_INTERRUPT.value
_RAW_SIZE: Final = ctypes.sizeof(ffi.wasmtime_val_raw_t)
#: opa_eval's arguments, each the i32 at the start of one raw value slot, and its result.
_EVAL_ARGS: Final = struct.Struct("<" + f"i{_RAW_SIZE - 4}x" * 7)
_RESULT_ARG: Final = struct.Struct("<i")
_NUL: Final = re.compile(b"\0")
#: A member key this host spells into JSON itself: a plain name, nothing to escape.
_MEMBER_KEY: Final = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")

# Integer-only prototypes of the few C functions on the evaluation path: ctypes converts
# plain ints in a fraction of the time it takes to build and check typed pointers.
_c = ctypes.c_void_p
_call_unchecked: Final = ctypes.CFUNCTYPE(_c, _c, _c, _c, ctypes.c_size_t, _c)(
    ("wasmtime_func_call_unchecked", ffi.dll)
)
_memory_data: Final = ctypes.CFUNCTYPE(_c, _c, _c)(("wasmtime_memory_data", ffi.dll))
_memory_size: Final = ctypes.CFUNCTYPE(ctypes.c_size_t, _c, _c)(
    ("wasmtime_memory_data_size", ffi.dll)
)
_set_deadline: Final = ctypes.CFUNCTYPE(None, _c, ctypes.c_uint64)(
    ("wasmtime_context_set_epoch_deadline", ffi.dll)
)
_caller_context: Final = ctypes.CFUNCTYPE(_c, _c)(("wasmtime_caller_context", ffi.dll))
_Callback: Final = ctypes.CFUNCTYPE(ctypes.c_size_t, _c, _c, _c, ctypes.c_size_t)
_i32_at: Final = ctypes.c_int32.from_address
_TRAP_POINTER: Final = ctypes.POINTER(ffi.wasm_trap_t)
_ERROR_POINTER: Final = ctypes.POINTER(ffi.wasmtime_error_t)
#: Host builtin results remembered per instance, by the exact text of their operands.
_RESULT_MEMO: Final = 4096
#: Compiled modules remembered per process, by the digest of their bytes.
_MODULE_MEMO: Final = 16
#: The most heap an instance gives to members it keeps parsed (a share of its memory cap).
MEMBER_HEAP_BYTES: Final = 4 << 20
#: The longest member text kept parsed; a longer one is parsed with its input every time.
MEMBER_MAX_BYTES: Final = 64 << 10
#: Heap a member's parsed value may take per byte of its text, reserved before parsing it.
_MEMBER_HEAP_FACTOR: Final = 16

#: ``opa_eval`` with one member of the input already parsed: the module's own exports in the
#: order ``opa_eval`` calls them (heap reset, input parsed with ``opa_value_parse``, eval,
#: ``opa_value_dump``), with ``opa_value_add_path`` putting the parsed member into the input
#: object between the parse and the evaluation. 0: the head is not an object (the caller
#: evaluates the whole document instead); -1: eval failed (``opa_eval`` aborts there).
_MEMBER_EVAL: Final = """
(module
  (import "opa" "opa_heap_ptr_set" (func $heap_ptr_set (param i32)))
  (import "opa" "opa_value_parse" (func $parse (param i32 i32) (result i32)))
  (import "opa" "opa_value_add_path" (func $add_path (param i32 i32 i32) (result i32)))
  (import "opa" "opa_eval_ctx_new" (func $ctx_new (result i32)))
  (import "opa" "opa_eval_ctx_set_entrypoint" (func $set_entrypoint (param i32 i32)))
  (import "opa" "opa_eval_ctx_set_data" (func $set_data (param i32 i32)))
  (import "opa" "opa_eval_ctx_set_input" (func $set_input (param i32 i32)))
  (import "opa" "eval" (func $eval (param i32) (result i32)))
  (import "opa" "opa_eval_ctx_get_result" (func $get_result (param i32) (result i32)))
  (import "opa" "opa_value_dump" (func $dump (param i32) (result i32)))
  (func (export "evaluate")
    (param $entrypoint i32) (param $data i32) (param $head i32) (param $length i32)
    (param $heap i32) (param $path i32) (param $member i32) (result i32)
    (local $input i32) (local $ctx i32)
    (call $heap_ptr_set (local.get $heap))
    (local.set $input (call $parse (local.get $head) (local.get $length)))
    (if (i32.eqz (local.get $input)) (then (return (i32.const 0))))
    (if (call $add_path (local.get $input) (local.get $path) (local.get $member))
      (then (return (i32.const 0))))
    (local.set $ctx (call $ctx_new))
    (call $set_entrypoint (local.get $ctx) (local.get $entrypoint))
    (call $set_data (local.get $ctx) (local.get $data))
    (call $set_input (local.get $ctx) (local.get $input))
    (if (call $eval (local.get $ctx)) (then (return (i32.const -1))))
    (call $dump (call $get_result (local.get $ctx)))))
"""
_MEMBER_EVAL_IMPORTS: Final = (
    "opa_heap_ptr_set",
    "opa_value_parse",
    "opa_value_add_path",
    "opa_eval_ctx_new",
    "opa_eval_ctx_set_entrypoint",
    "opa_eval_ctx_set_data",
    "opa_eval_ctx_set_input",
    "eval",
    "opa_eval_ctx_get_result",
    "opa_value_dump",
)


class AbiError(Exception):
    """A module this host cannot run: wrong ABI, unknown imports, missing builtins."""


class EvaluationTrap(Exception):  # noqa: N818 - a trap is what wasm calls it
    """An evaluation that stopped: ``timed_out`` when its epoch deadline passed."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class _Undefined(Exception):  # noqa: N818 - control flow inside a builtin
    """A builtin whose operands OPA would reject: the call is undefined, as in OPA."""


# -- host builtins --------------------------------------------------------------------------


def _builtin_sprintf(template: Any, operands: Any) -> Any:
    if not isinstance(template, str) or not isinstance(operands, list):
        raise _Undefined
    return sprintf(template, operands)


#: Builtins the host implements: name -> (arity, implementation over Rego values, giving a
#: JSON value). A module importing any other builtin is refused at load.
HOST_BUILTINS: Final[Mapping[str, tuple[int, Callable[..., Any]]]] = {
    "sprintf": (2, _builtin_sprintf),
}


# -- the compiled module --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    """A compiled policy module, its data document and what its exports declared.

    Build it with :func:`compile_policy`; it is immutable and shared by every thread.
    """

    engine: wasmtime.Engine
    module: wasmtime.Module
    data: bytes
    memory_limit: int
    memory_min_pages: int
    entrypoints: Mapping[str, int]
    builtins: Mapping[int, str]
    #: :data:`_MEMBER_EVAL` compiled for this engine; None: members are parsed every time.
    member_eval: wasmtime.Module | None = None


def compile_policy(
    engine: wasmtime.Engine, wasm: bytes, data: bytes, *, memory_limit: int
) -> CompiledPolicy:
    """Compile and check one policy module against this host.

    Raises:
        AbiError: the module does not compile, speaks another ABI, imports something this
            host does not provide (a builtin above all), or the data does not load.
    """
    module = _module(engine, wasm)
    min_pages = 0
    for item in module.imports:
        if item.module != "env" or item.name not in _KNOWN_IMPORTS:
            raise AbiError(f"policy module imports {item.module}.{item.name}")
        if item.name == "memory":
            if not isinstance(item.type, wasmtime.MemoryType):
                raise AbiError("policy module imports memory of another kind")
            min_pages = item.type.limits.min
    if min_pages * _PAGE > memory_limit:
        raise AbiError("policy module needs more memory than the limit")
    policy = CompiledPolicy(engine, module, data, memory_limit, min_pages, {}, {})
    probe = PolicyInstance(policy, check=True)
    exported = {item.name for item in module.exports}
    member_eval = (
        wasmtime.Module(engine, _MEMBER_EVAL) if exported.issuperset(_MEMBER_EVAL_IMPORTS) else None
    )
    return CompiledPolicy(
        engine,
        module,
        data,
        memory_limit,
        min_pages,
        probe.entrypoints,
        probe.builtins,
        member_eval,
    )


class _ModuleMemo:
    """Machine code of the modules compiled in this process, by the SHA-256 of their bytes.

    Compiling the shipped policy takes about a second; loading its machine code into
    another engine (all engines here share one configuration) takes milliseconds. The code
    is wasmtime's own serialization, made in this process and never read from elsewhere.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._code: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            code = self._code.get(key)
            if code is not None:
                self._code.move_to_end(key)
            return code

    def put(self, key: bytes, code: bytes) -> None:
        with self._lock:
            self._code[key] = code
            self._code.move_to_end(key)
            while len(self._code) > self._size:
                self._code.popitem(last=False)


_MODULES: Final = _ModuleMemo(_MODULE_MEMO)


def _module(engine: wasmtime.Engine, wasm: bytes) -> wasmtime.Module:
    key = hashlib.sha256(wasm).digest()
    code = _MODULES.get(key)
    if code is not None:
        try:
            return wasmtime.Module.deserialize(engine, code)
        except wasmtime.WasmtimeError:
            pass  # compiled afresh below
    try:
        module = wasmtime.Module(engine, wasm)
    except wasmtime.WasmtimeError:
        raise AbiError("policy module does not compile") from None
    _MODULES.put(key, bytes(module.serialize()))
    return module


# -- one instance ---------------------------------------------------------------------------


def _trap_message(trap: Any) -> tuple[str, bool]:
    code = ffi.wasmtime_trap_code_t()
    timed_out = bool(ffi.wasmtime_trap_code(trap, ctypes.byref(code))) and (
        code.value == _INTERRUPT
    )
    message = ffi.wasm_byte_vec_t()
    ffi.wasm_trap_message(trap, ctypes.byref(message))
    text = ctypes.string_at(message.data, message.size).decode("utf-8", "replace")
    ffi.wasm_byte_vec_delete(ctypes.byref(message))
    ffi.wasm_trap_delete(trap)
    return text.rstrip("\0"), timed_out


def _error_message(error: Any) -> str:
    message = ffi.wasm_byte_vec_t()
    ffi.wasmtime_error_message(error, ctypes.byref(message))
    text = ctypes.string_at(message.data, message.size).decode("utf-8", "replace")
    ffi.wasm_byte_vec_delete(ctypes.byref(message))
    ffi.wasmtime_error_delete(error)
    return text


def _new_trap(message: str) -> int:
    raw = message.encode("utf-8")
    trap = ffi.wasmtime_trap_new(raw, len(raw))
    address = ctypes.cast(trap, ctypes.c_void_p).value
    return 0 if address is None else address


class PolicyInstance:
    """One store, memory and instance of a :class:`CompiledPolicy`; for one thread only.

    The data document is parsed into the heap once; every :meth:`evaluate` resets the heap
    to just after it (``opa_eval`` takes the heap start), so evaluations leave nothing behind.
    :meth:`evaluate_member` also keeps members of the input (a tool's definition) parsed
    there, after the data, by their exact text: what the module reads of its input it never
    writes or frees (it copies before it changes a value, as it does for the data).
    """

    def __init__(self, policy: CompiledPolicy, *, check: bool = False) -> None:
        self.policy = policy
        self._store = wasmtime.Store(policy.engine)
        self._store.set_limits(memory_size=policy.memory_limit)
        # No deadline while loading: the data is the operator's, and is parsed once.
        self._store.set_epoch_deadline(2**62)
        context = self._store._context()  # noqa: SLF001 - the C API needs the raw context
        self._context: int = ctypes.cast(context, ctypes.c_void_p).value or 0
        max_pages = policy.memory_limit // _PAGE
        self._memory = wasmtime.Memory(
            self._store, wasmtime.MemoryType(wasmtime.Limits(policy.memory_min_pages, max_pages))
        )
        self._memory_at = ctypes.addressof(self._memory._memory)  # noqa: SLF001
        self._bind_buffers()
        self._callbacks: list[Any] = []  # the ctypes thunks must outlive the instance
        # Set when a host builtin's own call into the module passed the deadline: the trap
        # the builtin then returns carries no interrupt code of its own.
        self.builtin_timed_out = False
        self._results: dict[bytes, bytes] = {}
        self.builtins: dict[int, str] = dict(policy.builtins)
        imports: list[Any] = []
        for item in policy.module.imports:
            if item.name == "memory":
                imports.append(self._memory)
            elif isinstance(item.type, wasmtime.FuncType) and item.name is not None:
                imports.append(self._host_function(context, item.name, item.type))
            else:
                raise AbiError("policy module imports something other than functions and memory")
        try:
            instance = wasmtime.Instance(self._store, policy.module, imports)
        except (wasmtime.WasmtimeError, wasmtime.Trap) as exc:
            raise AbiError("policy module does not instantiate") from exc
        exports = instance.exports(self._store)
        self._funcs: list[Any] = []
        self._exports: dict[str, int] = {}
        for name in (
            "opa_eval",
            "opa_malloc",
            "opa_json_parse",
            "opa_value_dump",
            "opa_heap_ptr_get",
            "opa_heap_ptr_set",
            "opa_value_parse",
            "builtins",
            "entrypoints",
            "opa_json_dump",
        ):
            export = exports.get(name)
            if not isinstance(export, wasmtime.Func):
                raise AbiError(f"policy module does not export {name}")
            self._funcs.append(export)
            self._exports[name] = ctypes.addressof(export._func)  # noqa: SLF001
        self._eval_at = self._exports["opa_eval"]
        if check:
            self._check_abi(exports)
        self.entrypoints: dict[str, int] = (
            dict(policy.entrypoints) if policy.entrypoints else self._entrypoints()
        )
        self._data_addr = self._load_json(policy.data, self._context, self._args_at)
        if self._data_addr == 0:
            raise AbiError("policy data is not valid JSON")
        self._heap = self._call("opa_heap_ptr_get", 0, self._context, self._args_at)
        # Below self._heap and above the data: the members kept parsed, by (key, text).
        self._data_end = self._heap
        self._members: dict[tuple[bytes, bytes], tuple[int, int]] = {}
        self._member_budget = min(MEMBER_HEAP_BYTES, policy.memory_limit // 8)
        self._member_eval_at = 0
        if policy.member_eval is not None:
            self._bind_member_eval(policy.member_eval, exports)

    def _bind_member_eval(self, module: wasmtime.Module, exports: Any) -> None:
        funcs = [exports.get(name) for name in _MEMBER_EVAL_IMPORTS]
        if not all(isinstance(func, wasmtime.Func) for func in funcs):
            return
        try:
            shim = wasmtime.Instance(self._store, module, funcs)
        except (wasmtime.WasmtimeError, wasmtime.Trap):
            return  # exports of another type: members are parsed with every input
        func = shim.exports(self._store).get("evaluate")
        if isinstance(func, wasmtime.Func):
            self._funcs.append(func)
            self._member_eval_at = ctypes.addressof(func._func)  # noqa: SLF001

    def _bind_buffers(self) -> None:
        # One view of linear memory (its base never moves), the argument slots and the
        # trap slot, all made once: the evaluation path only reads and writes them.
        self._base: int = _memory_data(self._context, self._memory_at) or 0
        self._size = 0
        self._view = memoryview(b"")
        self._refresh()
        self._args = (ffi.wasmtime_val_raw_t * 7)()
        self._args_at = ctypes.addressof(self._args)
        self._args_view = memoryview(self._args).cast("B")
        self._host_args = (ffi.wasmtime_val_raw_t * 2)()
        self._host_args_at = ctypes.addressof(self._host_args)
        self._trap = ctypes.c_void_p()
        self._trap_at = ctypes.addressof(self._trap)

    # The checks a fresh module gets once, on a probe instance.
    def _check_abi(self, exports: Any) -> None:
        major = exports.get("opa_wasm_abi_version")
        minor = exports.get("opa_wasm_abi_minor_version")
        if not isinstance(major, wasmtime.Global) or not isinstance(minor, wasmtime.Global):
            raise AbiError("policy module declares no ABI version")
        version = (major.value(self._store), minor.value(self._store))
        if version[0] != ABI_MAJOR or not isinstance(version[1], int) or version[1] < ABI_MIN_MINOR:
            raise AbiError(f"policy module speaks ABI {version[0]}.{version[1]}")
        declared = _json.parse_trusted(self._dump_json(self._call_export("builtins")))
        if not isinstance(declared, dict):
            raise AbiError("policy module lists no builtins")
        for name, number in declared.items():
            if name not in HOST_BUILTINS:
                raise AbiError(f"policy module needs builtin {name}, which the host lacks")
            self.builtins[int(number)] = name

    def _entrypoints(self) -> dict[str, int]:
        declared = _json.parse_trusted(self._dump_json(self._call_export("entrypoints")))
        if not isinstance(declared, dict) or not declared:
            raise AbiError("policy module lists no entrypoints")
        return {str(name): int(number) for name, number in declared.items()}

    # -- raw calls ---------------------------------------------------------------------------

    def _call_export(self, name: str) -> int:
        return self._call(name, 0, self._context, self._args_at)

    def _call(self, name: str, count: int, context: int, args_at: int) -> int:
        return self._raw_call(self._exports[name], count, context, args_at)

    def _raw_call(self, func_at: int, count: int, context: int, args_at: int) -> int:
        self._trap.value = None
        error = _call_unchecked(context, func_at, args_at, max(count, 1), self._trap_at)
        if error:
            raise EvaluationTrap(_error_message(ctypes.cast(error, _ERROR_POINTER)))
        if self._trap.value:
            trap = ctypes.cast(self._trap.value, _TRAP_POINTER)
            message, timed_out = _trap_message(trap)
            raise EvaluationTrap(message, timed_out=timed_out)
        return int(_i32_at(args_at).value)

    def _string_at(self, address: int, context: int) -> bytes:
        # The address comes from the module: read only inside its memory.
        size = _memory_size(context, self._memory_at)
        if address <= 0 or address >= size:
            raise EvaluationTrap("result address outside memory")
        base = _memory_data(context, self._memory_at)
        text = ctypes.string_at(base + address)
        if address + len(text) >= size:
            raise EvaluationTrap("result string runs past memory")
        return text

    def _dump_json(self, address: int) -> bytes:
        _i32_at(self._args_at).value = address
        return self._string_at(
            self._call("opa_json_dump", 1, self._context, self._args_at), self._context
        )

    def _load_json(
        self, raw: bytes, context: int, args_at: int, parser: str = "opa_json_parse"
    ) -> int:
        _i32_at(args_at).value = len(raw)
        address = self._call("opa_malloc", 1, context, args_at)
        size = _memory_size(context, self._memory_at)
        if address <= 0 or address + len(raw) > size:
            raise EvaluationTrap("allocation outside memory")
        ctypes.memmove(_memory_data(context, self._memory_at) + address, raw, len(raw))
        _i32_at(args_at).value = address
        _i32_at(args_at + _RAW_SIZE).value = len(raw)
        return self._call(parser, 2, context, args_at)

    # -- host functions ----------------------------------------------------------------------

    def _host_function(self, context: Any, name: str, kind: wasmtime.FuncType) -> wasmtime.Func:
        this = weakref.ref(self)

        def abort(env: int, caller: int, values: int, count: int) -> int:
            return _new_trap("opa_abort")

        def println(env: int, caller: int, values: int, count: int) -> int:
            return 0

        def builtin(env: int, caller: int, values: int, count: int) -> int:
            instance = this()
            if instance is None:
                return _new_trap("policy instance is gone")
            try:
                result = instance.call_builtin(caller, values, count)
            except _Undefined:
                result = 0
            except EvaluationTrap as exc:
                # A call back into the module hit the deadline: the evaluation timed out.
                instance.builtin_timed_out = instance.builtin_timed_out or exc.timed_out
                return _new_trap(f"builtin failed: {type(exc).__name__}")
            except Exception as exc:  # noqa: BLE001 - becomes a trap: the evaluation fails
                return _new_trap(f"builtin failed: {type(exc).__name__}")
            _i32_at(values).value = result
            return 0

        if name == "opa_abort":
            body = abort
        elif name == "opa_println":
            body = println
        else:
            body = builtin
        callback = _Callback(body)
        self._callbacks.append(callback)
        func = ffi.wasmtime_func_t()
        ffi.wasmtime_func_new_unchecked(
            context,
            kind.ptr(),
            ctypes.cast(callback, ffi.wasmtime_func_unchecked_callback_t),
            None,
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(),
            ctypes.byref(func),
        )
        return wasmtime.Func._from_raw(func)  # noqa: SLF001

    def call_builtin(self, caller: int, values: int, count: int) -> int:
        """Run the host builtin a module called: its operands dumped, its result loaded."""
        context = _caller_context(caller)
        name = self.builtins.get(_i32_at(values).value)
        if name is None:
            raise AbiError("unknown builtin id")
        arity, implementation = HOST_BUILTINS[name]
        if count - 2 != arity:
            raise AbiError("builtin called with the wrong arity")
        args_at = self._host_args_at
        dumps: list[bytes] = []
        for index in range(2, count):
            _i32_at(args_at).value = _i32_at(values + index * _RAW_SIZE).value
            dumps.append(
                self._string_at(self._call("opa_value_dump", 1, context, args_at), context)
            )
        key = name.encode() + b"\0" + b"\0".join(dumps)
        encoded = self._results.get(key)
        if encoded is None:
            operands = [_rego_value.parse(dumped.decode("utf-8")) for dumped in dumps]
            encoded = _json.canonical(implementation(*operands))
            if len(self._results) >= _RESULT_MEMO:
                self._results.clear()
            self._results[key] = encoded
        address = self._load_json(encoded, context, args_at)
        if address == 0:
            raise AbiError("builtin result did not load")
        return address

    # -- evaluation --------------------------------------------------------------------------

    def evaluate(self, entrypoint: int, document: bytes, deadline_ticks: int) -> bytes:
        """Run one entrypoint over the input bytes; the result set as Rego text.

        Three C calls: the deadline, ``opa_eval`` and, only when the memory grew, its size.
        The input goes in and the result comes out through one view of linear memory, whose
        base never moves (see :func:`gateway.policy._epoch.new_engine`).

        Raises:
            EvaluationTrap: the evaluation trapped (``timed_out`` past the deadline).
        """
        context = self._context
        address = self._heap
        end = address + len(document)
        if end + _PAGE > self._size:
            self._refresh()
            if end + _PAGE > self._size:
                self._grow(end + _PAGE)
        self._view[address:end] = document
        _set_deadline(context, deadline_ticks)
        _EVAL_ARGS.pack_into(
            self._args_view,
            0,
            0,
            entrypoint,
            self._data_addr,
            address,
            len(document),
            end,
            _FORMAT_VALUE,
        )
        self.builtin_timed_out = False
        trap = self._trap
        trap.value = None
        error = _call_unchecked(context, self._eval_at, self._args_at, 7, self._trap_at)
        if error or trap.value:
            self._raise(error)
        (result,) = _RESULT_ARG.unpack_from(self._args_view)
        return self._read_string(result)

    def evaluate_member(
        self, entrypoint: int, head: bytes, key: bytes, member: bytes, deadline_ticks: int
    ) -> bytes | None:
        """:meth:`evaluate` of ``head`` with ``member`` put in it under ``key``, parsed once.

        ``head`` is the input object without ``key`` (JSON text), ``member`` the exact text
        of its value; the member is parsed the first time this instance sees that text and
        kept, so each evaluation parses only the head. The module gets the same input as
        from the whole document. ``None``: the member cannot be kept here (too long, not
        JSON, a module without the exports it needs) or the head is not an object; the
        caller evaluates the whole document instead.

        Raises:
            EvaluationTrap: the evaluation trapped (``timed_out`` past the deadline).
        """
        if not self._member_eval_at:
            return None
        context = self._context
        _set_deadline(context, deadline_ticks)
        self.builtin_timed_out = False
        kept = self._members.get((key, member))
        if kept is None:
            kept = self._keep(key, member)
            if kept is None:
                return None
        path, value = kept
        address = self._heap
        end = address + len(head)
        if end + _PAGE > self._size:
            self._refresh()
            if end + _PAGE > self._size:
                self._grow(end + _PAGE)
        self._view[address:end] = head
        _EVAL_ARGS.pack_into(
            self._args_view, 0, entrypoint, self._data_addr, address, len(head), end, path, value
        )
        trap = self._trap
        trap.value = None
        error = _call_unchecked(context, self._member_eval_at, self._args_at, 7, self._trap_at)
        if error or trap.value:
            self._raise(error)
        (result,) = _RESULT_ARG.unpack_from(self._args_view)
        if result == 0:
            return None
        if result == -1:
            raise EvaluationTrap("eval failed")
        return self._read_string(result)

    @property
    def kept_members(self) -> int:
        """How many member texts this instance keeps parsed."""
        return len(self._members)

    @property
    def kept_bytes(self) -> int:
        """The heap the kept members take (at most :attr:`member_budget`)."""
        return self._heap - self._data_end

    @property
    def member_budget(self) -> int:
        """The most heap kept members may take: ``MEMBER_HEAP_BYTES`` or an eighth of memory."""
        return self._member_budget

    def _keep(self, key: bytes, member: bytes) -> tuple[int, int] | None:
        # Parse the member where the next evaluation's heap would start, then start the heap
        # after it. The region is bounded: when it is full, every member kept is let go.
        if len(member) > MEMBER_MAX_BYTES or _MEMBER_KEY.fullmatch(key) is None:
            return None
        needed = (len(member) + len(key)) * _MEMBER_HEAP_FACTOR
        if needed > self._member_budget:
            return None
        if self._heap - self._data_end + needed > self._member_budget:
            self._members.clear()
            self._heap = self._data_end
        context, args_at = self._context, self._args_at
        _i32_at(args_at).value = self._heap
        self._call("opa_heap_ptr_set", 1, context, args_at)
        path = self._load_json(b'["' + key + b'"]', context, args_at, "opa_value_parse")
        value = self._load_json(member, context, args_at, "opa_value_parse")
        if path == 0 or value == 0:
            return None  # nothing kept: the heap start stays where it was
        self._heap = self._call("opa_heap_ptr_get", 0, context, args_at)
        self._refresh()
        kept = (path, value)
        self._members[(key, member)] = kept
        return kept

    def _raise(self, error: int | None) -> None:
        # A trap a host builtin returned after its own call back into the module passed the
        # deadline carries no interrupt code: the evaluation timed out all the same.
        if error:
            raise EvaluationTrap(
                _error_message(ctypes.cast(error, _ERROR_POINTER)), timed_out=self.builtin_timed_out
            )
        message, timed_out = _trap_message(ctypes.cast(self._trap.value or 0, _TRAP_POINTER))
        raise EvaluationTrap(message, timed_out=timed_out or self.builtin_timed_out)

    def _refresh(self) -> None:
        # The memory only grows, in place: a larger size needs only a larger view.
        size = _memory_size(self._context, self._memory_at)
        if size != self._size:
            self._size = size
            self._view = memoryview((ctypes.c_char * size).from_address(self._base)).cast("B")

    def _grow(self, needed: int) -> None:
        pages = math.ceil((needed - self._size) / _PAGE)
        try:
            self._memory.grow(self._store, pages)
        except wasmtime.WasmtimeError:
            raise EvaluationTrap("input does not fit the memory limit") from None
        self._refresh()

    def _read_string(self, address: int) -> bytes:
        # The address comes from the module: read only inside its memory, up to its NUL.
        if address <= 0:
            raise EvaluationTrap("result address outside memory")
        if address >= self._size:
            self._refresh()
            if address >= self._size:
                raise EvaluationTrap("result address outside memory")
        found = _NUL.search(self._view, address)
        if found is None:
            self._refresh()
            found = _NUL.search(self._view, address)
            if found is None:
                raise EvaluationTrap("result string runs past memory")
        return self._view[address : found.start()].tobytes()
