"""Server reflection as both `grpc.reflection.v1` and `grpc.reflection.v1alpha`.

grpcio-reflection (1.85) implements only v1alpha, while current tools and libraries
(grpcurl, Node's and Go's reflection clients) ask for v1 first. The two protocols are
the same messages under another package (v1 is v1alpha promoted unchanged, field
numbers included), so the v1alpha servicer answers v1 calls byte for byte. For v1 to be
reflected itself, its descriptor is built from v1alpha's, renamed, and added to the
default pool the servicer reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc import aio
from grpc_reflection.v1alpha import reflection  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha

T = TypeVar("T")
V1ALPHA_SERVICE: str = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = f"{V1_PACKAGE}.ServerReflection"
# The file name and options of grpc/reflection/v1/reflection.proto as published.
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_OPTIONS = {
    "go_package": "google.golang.org/grpc/reflection/grpc_reflection_v1",
    "java_multiple_files": True,
    "java_package": "io.grpc.reflection.v1",
    "java_outer_classname": "ServerReflectionProto",
}


def enable_reflection(server: aio.Server, services: Iterable[str], stopping: asyncio.Event) -> None:
    """Reflect `services` and both reflection services, under v1 and v1alpha. A
    reflection stream ends (OK) once `stopping` is set: a tool that keeps one open must
    not hold the server's stop up for its whole grace period."""
    _add_v1_descriptor(descriptor_pool.Default())
    names = (*services, V1_SERVICE, V1ALPHA_SERVICE)
    servicer = reflection.aio.ReflectionServicer(names)

    async def info(
        requests: AsyncIterator[Any], context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async for answer in servicer.ServerReflectionInfo(_until(stopping, requests), context):
            yield answer

    handler = grpc.stream_stream_rpc_method_handler(
        info,
        request_deserializer=v1alpha.ServerReflectionRequest.FromString,
        response_serializer=v1alpha.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        tuple(
            grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler})
            for name in (V1_SERVICE, V1ALPHA_SERVICE)
        )
    )


async def _until(stop: asyncio.Event, items: AsyncIterator[T]) -> AsyncIterator[T]:
    """`items` until they end or `stop` is set, whichever comes first."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            item = asyncio.ensure_future(anext(items))
            await asyncio.wait((item, stopped), return_when=asyncio.FIRST_COMPLETED)
            if not item.done():
                item.cancel()
                return
            try:
                yield item.result()
            except StopAsyncIteration:
                return
    finally:
        stopped.cancel()


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """grpc/reflection/v1/reflection.proto in `pool` (once), made from v1alpha's."""
    try:
        pool.FindFileByName(V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha.DESCRIPTOR.CopyToProto(proto)
    old = proto.package
    proto.name, proto.package = V1_FILE, V1_PACKAGE
    proto.options.Clear()
    for key, value in V1_OPTIONS.items():
        setattr(proto.options, key, value)
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # proto2: assigning "" would set it
                field.type_name = field.type_name.replace(f".{old}.", f".{V1_PACKAGE}.")
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(f".{old}.", f".{V1_PACKAGE}.")
            method.output_type = method.output_type.replace(f".{old}.", f".{V1_PACKAGE}.")
    pool.AddSerializedFile(proto.SerializeToString())
