"""Calls a running tenantplane planner the way platform tooling in Python would: no generated
code, only server reflection (grpcio-reflection) to discover the API, grpc.health.v1 to wait for
it, and the google.rpc rich error model (grpcio-status) to read field violations.

Usage: planner_client.py HOST:PORT   (exits non-zero with a message on the first mismatch)
"""

import json
import sys

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

PLANNER = "tenantplane.planner.v1.Planner"
# What the planner serves: its API, health and reflection, and nothing else.
SERVED = {
    PLANNER,
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
}


def main(address):
    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)

    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service=PLANNER)).status
    assert status == health_pb2.HealthCheckResponse.SERVING, status

    database = ProtoReflectionDescriptorDatabase(channel)
    services = database.get_services()
    assert set(services) == SERVED, services
    pool = DescriptorPool(database)

    def rpc(name):
        method = pool.FindServiceByName(PLANNER).methods_by_name[name]
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        call = channel.unary_unary(
            f"/{PLANNER}/{name}",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        return request, call

    outcome = pool.FindEnumTypeByName("tenantplane.types.v1.Outcome")
    plan_form = pool.FindEnumTypeByName("tenantplane.planner.v1.PlanForm")
    decision_form = pool.FindEnumTypeByName("tenantplane.planner.v1.DecisionForm")
    placement_form = pool.FindEnumTypeByName("tenantplane.planner.v1.PlacementForm")

    Version, get_version = rpc("GetVersion")
    version = get_version(Version(), timeout=10)
    # the newest mapping scheme; each request names its tenant's
    assert version.mapping_version == "v2", version

    PlanRequest, plan = rpc("Plan")
    request = PlanRequest()
    request.tenant.name = "acme"
    request.tenant.host_namespace = "tenant-acme"
    request.tenant.mapping_version = "v2"
    # A client that reads the answer as it comes asks for complete plans, with plan_form alone
    # (the recommendation on PlanForm in planner.proto).
    request.plan_form = plan_form.values_by_name["PLAN_FORM_STANDARD"].number
    objects = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "shop"}},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "debug", "namespace": "ops"},
            "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]},
        },
    ]
    request.objects.extend(json.dumps(o).encode() for o in objects)
    response = plan(request, timeout=10)
    forms = (
        plan_form.values_by_number[response.plan_form].name,
        decision_form.values_by_number[response.decision_form].name,
        placement_form.values_by_number[response.placement_form].name,
    )
    assert forms == ("PLAN_FORM_STANDARD", "DECISION_FORM_FULL", "PLACEMENT_FORM_FULL"), forms
    names = [outcome.values_by_number[p.outcome].name for p in response.plans]
    assert names == ["OUTCOME_SYNCED", "OUTCOME_REJECTED"], names
    synced = response.plans[0]
    assert synced.placement.target.namespace == "tenant-acme", synced
    assert synced.placement.target.name == "web-x-shop", synced
    assert synced.decision.component == "tenantplane-planner", synced.decision
    assert synced.decision.target.name == "web-x-shop", synced.decision
    assert synced.decision.mapping_version == "v2", synced.decision
    assert synced.placement.labels["tenantplane.io/tenant"] == "acme", synced.placement
    assert response.plans[1].verdict.field_path == "spec.hostNetwork", response.plans[1]

    request.objects.append(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {}}).encode())
    try:
        plan(request, timeout=10)
        raise AssertionError("a nameless object was planned")
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        details = rpc_status.from_call(error).details
        bad_request = error_details_pb2.BadRequest()
        assert details[0].Unpack(bad_request), details
        fields = [v.field for v in bad_request.field_violations]
        assert fields == ["objects[2].metadata.name"], fields

    print("python grpcio client: health, reflection, GetVersion, Plan and BadRequest details ok")


if __name__ == "__main__":
    main(sys.argv[1])
