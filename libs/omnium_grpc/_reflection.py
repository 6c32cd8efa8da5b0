"""Server reflection under both names clients ask for: grpc.reflection.v1 (grpcurl and
grpc-js try it first) and grpc.reflection.v1alpha (older clients).

grpcio-reflection serves only v1alpha. The v1 service is the same proto under another package,
message for message, so the same servicer answers both: v1's descriptor is made from v1alpha's
with the package renamed (so a client can also describe the v1 service itself), and v1's method
is registered with v1alpha's (wire-identical) messages."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from omnium_grpc._handlers import GuardedRegistrar

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME


def _add_v1_descriptor() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindServiceByName(V1_SERVICE_NAME)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = "grpc/reflection/v1/reflection.proto"
    proto.package = "grpc.reflection.v1"
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name:
                field.type_name = field.type_name.replace(old, new)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    proto.options.Clear()
    pool.Add(proto)


def add_reflection(registrar: GuardedRegistrar, service_names: list[str]) -> None:
    """Register reflection, v1 and v1alpha, listing `service_names` and itself."""
    _add_v1_descriptor()
    servicer = reflection.aio.ReflectionServicer(
        [*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    )
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, registrar)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    registrar.add_registered_method_handlers(V1_SERVICE_NAME, {"ServerReflectionInfo": handler})
