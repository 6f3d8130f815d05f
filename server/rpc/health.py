"""The standard `grpc.health.v1.Health` service, whose `Watch` streams end when the
server stops.

grpcio-health-checking's servicer keeps a `Watch` stream open after a graceful shutdown
starts (it sends NOT_SERVING and waits for more changes), so the server's stop waited its
whole grace period for every watcher and then cancelled it with a logged CancelledError.
Here a watch sends NOT_SERVING and ends with OK once the shutdown starts: a watcher learns
why the stream ended, and the server stops at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

Status = int  # health_pb2.HealthCheckResponse.ServingStatus
SERVING: Status = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Status = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN: Status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
# The name health checks use for the service itself.
SERVICE_NAME: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class Health(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """SERVING for the empty name and each of `services` until `shut_down`, then
    NOT_SERVING for all, for good."""

    def __init__(self, services: Iterable[str]) -> None:
        self._status: dict[str, Status] = dict.fromkeys(("", *services), SERVING)
        self._changed = asyncio.Condition()
        self._stopping = False

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: aio.ServicerContext[Any, Any]
    ) -> None:
        """The service's status now and at every change; NOT_SERVING, then the end of
        the stream, once the server stops."""
        sent: list[Status] = []  # the last status written
        while True:
            async with self._changed:
                await self._changed.wait_for(
                    lambda: self._stopping or [self._now(request.service)] != sent
                )
                status, stopping = self._now(request.service), self._stopping
            if [status] != sent:
                # written without the lock: a slow reader must not hold up a shutdown
                await context.write(health_pb2.HealthCheckResponse(status=status))
                sent[:] = [status]
            if stopping:
                return

    def _now(self, service: str) -> Status:
        return self._status.get(service, SERVICE_UNKNOWN)

    async def shut_down(self) -> None:
        """Every service NOT_SERVING for good; open watches send it and end."""
        async with self._changed:
            self._stopping = True
            for name in self._status:
                self._status[name] = NOT_SERVING
            self._changed.notify_all()


def add_health(server: aio.Server, services: Iterable[str]) -> Health:
    servicer = Health(services)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer
