"""Validates rendered manifests: built-in kinds against the Kubernetes 1.34 OpenAPI schemas
(`kubernetes-validate`, strict: unknown fields are errors), tenantplane's own kinds (Tenant,
SyncPolicy, IsolationProfile) against the openAPIV3Schema of our CRDs (`jsonschema`), with unknown
fields rejected as `kubectl apply`'s strict field validation does.

Usage: validate_manifests.py CRD_YAML < objects.json (a JSON array). Prints one line per failure
and exits 1 if any failed; exits 3 when a package is missing, so that the calling test can tell a
missing tool from a failure.
"""

import json
import sys

try:
    import jsonschema
    import kubernetes_validate
    import yaml
except ImportError as e:
    print(f"missing Python package: {e.name}")
    sys.exit(3)

KUBERNETES_VERSION = "1.34.0"


def strict(schema):
    """The schema with unknown fields rejected wherever the CRD lists the known ones."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


def crd_schemas(path):
    """(apiVersion, kind) -> JSON schema of that custom resource."""
    schemas = {}
    with open(path) as f:
        for crd in yaml.safe_load_all(f):
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                # apiVersion, kind and metadata are the API server's; the CRD schema need not
                # describe them.
                schema["properties"]["apiVersion"] = {"const": f"{spec['group']}/{version['name']}"}
                schema["properties"]["kind"] = {"const": spec["names"]["kind"]}
                schema["properties"]["metadata"] = {"type": "object"}
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


custom = crd_schemas(sys.argv[1])
objects = json.load(sys.stdin)
failures = 0
for obj in objects:
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    key = (obj.get("apiVersion"), obj.get("kind"))
    try:
        if key in custom:
            jsonschema.validate(obj, custom[key])
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except Exception as e:  # ValidationError, SchemaNotFoundError, ...
        failures += 1
        print(f"{name}: {type(e).__name__}: {getattr(e, 'message', e)}")
print(
    f"{len(objects)} objects validated (Kubernetes {KUBERNETES_VERSION} schemas, "
    f"tenantplane CRD schemas), {failures} failed"
)
sys.exit(1 if failures else 0)
