"""Validates Kubernetes objects against the real Kubernetes 1.34 OpenAPI schemas.

Reads a JSON array of objects on standard input and validates each with the `kubernetes-validate`
package (strict: unknown fields are errors). Prints one line per failure and exits 1 if any
failed; exits 3 when the package is not installed, so that the calling test can tell a missing
tool from a failure.
"""

import json
import sys

try:
    import kubernetes_validate
except ImportError:
    sys.exit(3)

KUBERNETES_VERSION = "1.34.0"

failures = 0
for obj in json.load(sys.stdin):
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except Exception as e:  # ValidationError, SchemaNotFoundError, ...
        failures += 1
        print(f"{name}: {type(e).__name__}: {getattr(e, 'message', e)}")
print(f"validated against Kubernetes {KUBERNETES_VERSION} schemas, {failures} failed")
sys.exit(1 if failures else 0)
