"""The SDK's models are held to the API's OpenAPI description: the checked-in one, and the one the daemon serves.

Each model names its schema. Every property of the schema must be a field of the model with a compatible
type, and every field must be a property: a field the spec gains fails here until the model has it."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import pytest

import berth
from berth import _api, models
from berth._core import exec_body
from conftest import REPO

SPEC_PATH = REPO / "crates" / "berth-api" / "openapi.json"

# Schemas the SDK meets in another form than a response model, and where.
NOT_MODELLED = {
    "CreateSandbox": "Sandbox.create's keyword options (checked below)",
    "ExecRequest": "Sandbox.exec's keyword options (checked below)",
    "SandboxState": "a string field", "Isolation": "a string field", "TtlAction": "a string field", "Stream": "a string field", "ErrorCode": "BerthError subclasses (checked below)",
    "ExecFrame": "the union of the ExecFrame* models", "ErrorBody": "raised as BerthError", "ApiError": "raised as BerthError",
    "EventKind": "a string field", "FileKind": "a string field", "ChangeKind": "a string field",
    "MintToken": "tokens.create(name, tenant=, read_only=, selector=)", "CreateTenant": "tenants.create(name, quota)", "MoveFile": "files.move(src, dst, overwrite=, user=)", "CreateSnapshot": "snapshot(name, with_processes=)", "ForkRequest": "fork(n, with_processes=)",
    "RestoreRequest": "restore(snapshot)", "ResetRequest": "reset(keep_workspace=)", "ExportRequest": "export(...) (checked below)",
    "CreateVolume": "volumes.create(name)", "InitStorage": "init_storage(size_bytes)", "ImportImage": "images.import_(name, source)",
    "ImportFrame": "images.import_", "ImportFrameDone": "images.import_", "ImportFrameError": "raised as BerthError",
    "NetChange": "net.change(allow, deny)", "SetTtl": "set_ttl(seconds)", "CreatePreview": "expose(port, public=, ttl=)",
    "CreateContext": "create_code_context(language, cwd=, env=)", "RunCode": "run_code(code, timeout=, max_output=, env=)",
    "ContextLanguage": "a string field", "ContextState": "a string field", "Interrupted": "interrupt() -> bool",
    "RunFrame": "gathered into Execution",
    "PodRequest": "berth-oci's (pods)", "PodContainer": "berth-oci's (pods)", "Pod": "berth-oci's (pods)",
    "PodEvent": "berth-oci's (pods)", "PodFork": "berth-oci's (pods)", "PodReceipt": "berth-oci's (pods)",
    "ClusterInfo": "the node agent's (pods)", "ClusterVolume": "the node agent's (pods)",
    "ClusterPod": "the node agent's (pods)",
    "WatchEvent": "models.WatchEvent, read by files.watch (its from is from_)", "WatchKind": "a string field",
    "Window": "models.Window, read in DesktopInfo (its class is class_; checked below)", "Button": "a string argument",
    "DesktopActions": "desktop.actions(actions, coordinates_in=)", "DesktopAction": "the dicts desktop.actions takes",
    "WaitSettled": "desktop.wait(settle_ms, timeout_ms)",
}  # fmt: skip
# Each frame of a code run is gathered into an Execution (results.RunGather), whatever its schema is named.
NOT_MODELLED_PREFIXES = ("RunFrame", "DesktopAction")
# Models of routes the daemon is gaining; checked when the spec has them.
PENDING = {"Context", "RunEnd"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return json.loads(SPEC_PATH.read_text())


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Flatten allOf and follow $ref to the properties an object schema has."""
    if "$ref" in schema:
        return resolve(spec, spec["components"]["schemas"][schema["$ref"].split("/")[-1]])
    if "allOf" in schema:
        out: dict[str, Any] = {"properties": {}, "required": []}
        for part in schema["allOf"]:
            r = resolve(spec, part)
            out["properties"].update(r.get("properties", {}))
            out["required"] += r.get("required", [])
        return out
    return schema


def compatible(spec: dict[str, Any], schema: dict[str, Any], tp: Any) -> bool:
    """Whether values of ``schema`` are read as ``tp``."""
    if tp is Any or schema == {}:
        return tp is Any or schema == {}
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = True
        tp = args[0] if len(args) == 1 else tp
    else:
        nullable = False
    if len(schema.get("allOf", [])) == 1:
        return compatible(spec, schema["allOf"][0], tp)
    options = schema.get("oneOf") or schema.get("anyOf")
    if options:
        non_null = [o for o in options if o.get("type") != "null"]
        has_null = len(non_null) < len(options)
        return (nullable or not has_null) and all(compatible(spec, o, tp) for o in non_null)
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        target = spec["components"]["schemas"][name]
        if dataclasses.is_dataclass(tp):
            return tp.__schema__ == name
        return compatible(spec, target, tp)
    types_ = schema.get("type")
    if isinstance(types_, list):
        if "null" in types_ and not nullable:
            return False
        types_ = [t for t in types_ if t != "null"]
        types_ = types_[0] if len(types_) == 1 else types_
    simple = {"string": str, "integer": int, "number": float, "boolean": bool}
    if types_ in simple:
        return tp is simple[types_]
    if types_ == "array":
        if "prefixItems" in schema:
            return typing.get_origin(tp) is tuple and all(
                compatible(spec, s, a) for s, a in zip(schema["prefixItems"], typing.get_args(tp))
            )
        return typing.get_origin(tp) is list and compatible(spec, schema.get("items", {}), typing.get_args(tp)[0])
    if types_ == "object":
        return typing.get_origin(tp) is dict and compatible(spec, schema.get("additionalProperties", {}), typing.get_args(tp)[1])
    return False


@pytest.mark.parametrize("cls", models.MODELS, ids=lambda c: c.__name__)
def test_model_matches_spec(spec, cls):
    schemas = spec["components"]["schemas"]
    if cls.__schema__ not in schemas:
        if cls.__schema__ in PENDING:
            pytest.skip(f"the spec has no {cls.__schema__} schema yet")
        pytest.fail(f"{cls.__name__} models {cls.__schema__}, which the spec does not have")
    schema = resolve(spec, schemas[cls.__schema__])
    props = schema.get("properties", {})
    hints = typing.get_type_hints(cls, vars(models))
    fields = {f.name for f in dataclasses.fields(cls)}
    assert set(props) - fields == set(), f"{cls.__name__} lacks fields the spec's {cls.__schema__} has"
    assert fields - set(props) == set(), f"{cls.__name__} has fields the spec's {cls.__schema__} has not"
    for name, prop in props.items():
        assert compatible(spec, prop, hints[name]), f"{cls.__name__}.{name}: {hints[name]} does not hold {prop}"
    required = set(schema.get("required", []))
    for f in dataclasses.fields(cls):
        optional_in_model = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if f.name not in required:
            assert optional_in_model, f"{cls.__name__}.{f.name} is optional in the spec but required here"


def test_window_matches_spec(spec):
    """Window's fields are the spec's properties, ``class`` read as ``class_``."""
    props = spec["components"]["schemas"]["Window"]["properties"]
    assert {f.name.rstrip("_") for f in dataclasses.fields(models.Window)} == set(props)
    w = models.Window.from_dict({"id": "0x1", "title": "t", "class": "a.B", "pid": None, "x": 1, "y": 2, "width": 3,
                                 "height": 4, "focused": True})  # fmt: skip
    assert (w.class_, w.width, w.focused) == ("a.B", 3, True)


def test_every_schema_is_modelled_or_accounted_for(spec):
    modelled = {cls.__schema__ for cls in models.MODELS}
    missing = {n for n in set(spec["components"]["schemas"]) - modelled - set(NOT_MODELLED) if not n.startswith(NOT_MODELLED_PREFIXES)}
    assert missing == set(), f"schemas the SDK neither models nor handles: {sorted(missing)}"


def test_create_options_are_the_specs_fields(spec):
    assert set(_api.CREATE_FIELDS) == set(spec["components"]["schemas"]["CreateSandbox"]["properties"])


def test_exec_options_cover_the_exec_request(spec):
    body = exec_body(["x"], timeout=1, max_output=64, max_log=1024, env={"A": "b"}, cwd="/w", stdin="s", detach=True,
                     stdin_open=True, user="user")  # fmt: skip
    assert set(body) == set(spec["components"]["schemas"]["ExecRequest"]["properties"])


def test_export_options_cover_the_export_request(spec):
    import inspect

    params = set(inspect.signature(berth.Sandbox.export).parameters) - {"self"}
    assert params == set(spec["components"]["schemas"]["ExportRequest"]["properties"])


def test_every_error_code_has_its_exception(spec):
    from berth.errors import BY_CODE

    for code in spec["components"]["schemas"]["ErrorCode"]["enum"]:
        assert code in BY_CODE, f"no exception class for the code {code}"
        assert issubclass(BY_CODE[code], berth.BerthError)


def test_the_daemon_serves_a_description(client):
    served = client.openapi()
    assert served["openapi"].startswith("3.1") and "/v1/sandboxes" in served["paths"]


def test_the_checker_catches_a_new_field(spec):
    """The conformance test can fail: a spec with one more property is caught."""
    grown = json.loads(json.dumps(spec))
    grown["components"]["schemas"]["Sandbox"]["properties"]["zone"] = {"type": "string"}
    props = grown["components"]["schemas"]["Sandbox"]["properties"]
    assert set(props) - {f.name for f in dataclasses.fields(models.SandboxInfo)} == {"zone"}, props
    hints = typing.get_type_hints(models.SandboxInfo, vars(models))
    assert not compatible(spec, {"type": "string"}, hints["pid"])
    assert not compatible(spec, {"type": ["integer", "null"]}, int)
