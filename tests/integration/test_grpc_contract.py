"""What another team meets calling our gRPC services directly: bytes that are not the method's
message get INVALID_ARGUMENT in plain words (no class name, no traceback in our log), with or
without tokens, and server reflection answers under grpc.reflection.v1 as well as v1alpha."""

from __future__ import annotations

import logging

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from omnium_grpc import open_channel
from tests.support.command import running_command

SERVICE = "omnium.command.v1.CommandService"
# Field 1 says length-delimited, 200 bytes long, and the message ends after three.
CORRUPT = b"\x0a\xc8\x01abc"


def _raw(channel: grpc.aio.Channel, method: str, *, streaming: bool = False) -> object:
    make = channel.unary_stream if streaming else channel.unary_unary
    return make(method, request_serializer=None, response_deserializer=None)


@pytest.mark.parametrize("auth", [True, False])
async def test_corrupt_bytes_answer_invalid_argument_in_plain_words(
    database_url: str, auth: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running_command(database_url, grpc_auth_required=auth) as client:
        calls = {
            "Submit": _raw(client.channel, f"/{SERVICE}/Submit"),
            "GetTimeline": _raw(client.channel, f"/{SERVICE}/GetTimeline", streaming=True),
        }
        answers = {}
        for name, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                result = call(CORRUPT, timeout=10)  # type: ignore[operator]
                if name == "GetTimeline":
                    async for _ in result:
                        pass
                else:
                    await result
            answers[name] = caught.value
        health = _raw(
            grpc.aio.insecure_channel(f"127.0.0.1:{client.port}"), "/grpc.health.v1.Health/Check"
        )
        with pytest.raises(grpc.aio.AioRpcError) as unhealthy:
            await health(CORRUPT, timeout=10)  # type: ignore[operator]
    for name, error in [*answers.items(), ("Health/Check", unhealthy.value)]:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, error)
        details = error.details() or ""
        assert "is not a valid message" in details and "protos/" in details, details
        assert "DecodeError" not in details and "Exception" not in details, details
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def _reflect(
    channel: grpc.aio.Channel, version: str, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    call = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    async for response in call(iter([request]), timeout=10):
        return response
    raise AssertionError("reflection sent no answer")


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_answers_v1_and_v1alpha(database_url: str, version: str) -> None:
    async with running_command(database_url) as client:
        channel = open_channel(f"127.0.0.1:{client.port}", client.settings)
        listed = await _reflect(
            channel, version, reflection_pb2.ServerReflectionRequest(list_services="")
        )
        names = {s.name for s in listed.list_services_response.service}
        described = await _reflect(
            channel,
            version,
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        )
        itself = await _reflect(
            channel,
            version,
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol=f"grpc.reflection.{version}.ServerReflection"
            ),
        )
        await channel.close()
    assert {SERVICE, "grpc.reflection.v1.ServerReflection"} <= names
    assert "grpc.reflection.v1alpha.ServerReflection" in names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto
    ]
    assert any(
        f.package == "omnium.command.v1" and any(s.name == "CommandService" for s in f.service)
        for f in files
    ), [f.name for f in files]
    own = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in itself.file_descriptor_response.file_descriptor_proto
    ]
    assert [f.package for f in own] == [f"grpc.reflection.{version}"]
