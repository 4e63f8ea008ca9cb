"""The fake Daytona: its state, API and toolbox routes on one scaffold service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web

from mango.fakes import FakeService
from mango.provider import SandboxSpec
from mango_provider_daytona.fake.api import ApiRoutes
from mango_provider_daytona.fake.preview import PreviewRoutes
from mango_provider_daytona.fake.sessions import SessionRoutes
from mango_provider_daytona.fake.state import FAKE_API_KEY, FAKE_MAX_OUTPUT_BYTES, error
from mango_provider_daytona.fake.toolbox import ToolboxRoutes

__all__ = ["DaytonaFake", "open_fake_daytona", "routes"]


@attrs.define(eq=False)
class DaytonaFake(ApiRoutes, ToolboxRoutes, SessionRoutes, PreviewRoutes):
    """The state of one fake Daytona deployment and its routes."""

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def routes(self, service: FakeService) -> Iterable[web.RouteDef]:
        """The fake's routes on ``service`` (the scaffold's ``RoutesFactory``)."""
        self.service = service

        def guarded(handler: Any) -> Any:
            async def wrapper(request: web.Request) -> web.StreamResponse:
                if not self._authorized(request):
                    return error(401, "Unauthorized")
                response: web.StreamResponse = await handler(request)
                return response

            return wrapper

        toolbox = "/toolbox/{id}"
        session = toolbox + "/process/session/{session}"
        return [
            web.get("/sandbox", guarded(self.list_sandboxes)),
            web.post("/sandbox", guarded(self.create_sandbox)),
            web.get("/sandbox/{id}", guarded(self.get_sandbox)),
            web.delete("/sandbox/{id}", guarded(self.delete_sandbox)),
            web.post("/sandbox/{id}/start", guarded(self.start_sandbox)),
            web.post("/sandbox/{id}/stop", guarded(self._transition("stopped"))),
            web.post("/sandbox/{id}/archive", guarded(self._transition("archived"))),
            web.post("/sandbox/{id}/pause", guarded(self._transition("paused"))),
            web.post("/sandbox/{id}/last-activity", guarded(self.touch_sandbox)),
            web.get("/sandbox/{id}/ports/{port}/preview-url", guarded(self.preview_url)),
            # The preview proxy checks the preview token (or the key) itself.
            web.route("*", "/preview/{id}/{port:\\d+}", self.preview),
            web.route("*", "/preview/{id}/{port:\\d+}/{tail:.*}", self.preview),
            web.get(f"{toolbox}/user-home-dir", guarded(self.home_dir)),
            web.get(f"{toolbox}/project-dir", guarded(self.home_dir)),
            web.get(f"{toolbox}/work-dir", guarded(self.home_dir)),
            web.post(f"{toolbox}/process/execute", guarded(self.execute)),
            web.post(f"{toolbox}/process/session", guarded(self.create_session)),
            web.get(f"{toolbox}/process/session", guarded(self.list_sessions)),
            web.get(f"{session}", guarded(self.get_session)),
            web.delete(f"{session}", guarded(self.delete_session)),
            web.post(f"{session}/exec", guarded(self.session_execute)),
            web.get(f"{session}/command/{{command}}", guarded(self.session_command)),
            web.get(f"{session}/command/{{command}}/logs", guarded(self.session_command_logs)),
            web.post(f"{toolbox}/files/folder", guarded(self.make_folder)),
            web.get(f"{toolbox}/files/info", guarded(self.file_info)),
            web.delete(f"{toolbox}/files", guarded(self.delete_file)),
            web.post(f"{toolbox}/files/move", guarded(self.move_file)),
            web.get(f"{toolbox}/files/search", guarded(self.search_files)),
            web.post(f"{toolbox}/files/bulk-upload", guarded(self.upload)),
            web.post(f"{toolbox}/files/bulk-download", guarded(self.download)),
        ]


def routes(service: FakeService) -> Iterable[web.RouteDef]:
    """A standalone fake's routes, accepting :data:`FAKE_API_KEY`."""
    return DaytonaFake().routes(service)


@asynccontextmanager
async def open_fake_daytona(
    scratch_dir: Path, *, api_key: str = FAKE_API_KEY
) -> AsyncIterator[tuple[FakeService, DaytonaFake]]:
    """Serve a fake Daytona on 127.0.0.1 with sandboxes under ``scratch_dir``."""
    fake = DaytonaFake(api_key=api_key)
    service = FakeService(
        Path(scratch_dir),
        fake.routes,
        name="daytona",
        spec=SandboxSpec(),
        max_output_bytes=FAKE_MAX_OUTPUT_BYTES,
    )
    try:
        async with service:
            yield service, fake
    finally:
        await fake.reap()  # the sessions' shells, killed with their sandboxes, are waited for
