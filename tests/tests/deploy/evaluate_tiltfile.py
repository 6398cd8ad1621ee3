"""Evaluates a Tiltfile with the Starlark interpreter (starlark-rust, through starlark-pyo3),
Tilt's builtins and extensions replaced by stubs that record each call.

Input on stdin, JSON: {"tiltfile": PATH, "builtins": [NAME...], "extensions": {PATH: [NAME...]},
"settings": OBJECT or null (what read_json answers; null: no settings file)}.
Output on stdout, JSON: the calls in order, each {"builtin", "args", "kwargs"}. A builtin or
extension the stubs do not know fails the evaluation, naming it.

(The interpreter runs from Python rather than as the `starlark` crate because that crate turns on
serde_json's arbitrary_precision feature, which would change how every tenantplane crate handles
numbers when the workspace is tested together.)
"""

import json
import sys

import starlark as sl

request = json.load(sys.stdin)
calls = []


def recorder(name):
    def record(*args, **kwargs):
        call = {"builtin": name, "args": list(args), "kwargs": dict(kwargs)}
        calls.append(call)
        return call

    return record


def read_json(path, default=None):
    calls.append({"builtin": "read_json", "args": [path], "kwargs": {}})
    return request["settings"] if request["settings"] is not None else default


def load(path):
    if path not in request["extensions"]:
        raise ValueError(f"the Tiltfile loads {path}, which these tests have no stub for")
    module = sl.Module()
    for name in request["extensions"][path]:
        module.add_callable(name, recorder(name))
    return module.freeze()


dialect = sl.Dialect.standard()
dialect.enable_top_level_stmt = True  # Tilt allows if and for at the top level.
with open(request["tiltfile"]) as f:
    ast = sl.parse("Tiltfile", f.read(), dialect)
module = sl.Module()
for name in request["builtins"]:
    module.add_callable(name, recorder(name))
module.add_callable("read_json", read_json)
sl.eval(module, ast, sl.Globals.standard(), sl.FileLoader(load))
json.dump(calls, sys.stdout)
