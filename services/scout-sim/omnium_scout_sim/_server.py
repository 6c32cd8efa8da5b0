"""The simulated Scout served: `ScoutSimulator` is the Scout of _simulator.py with its HTTP
API (_app.py) on a port of its own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from aiohttp import web

from omnium_scout_sim._app import make_app
from omnium_scout_sim._simulator import Scout, SimulatorConfig


class ScoutSimulator(Scout):
    """A Scout for omnium's demo and tests: `await start()`, use it over HTTP or here, `stop()`.

    Everything the control API does is a method here too, for tests in the same process.
    """

    def __init__(
        self,
        config: SimulatorConfig | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(config, clock=clock)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._host = "127.0.0.1"

    def make_app(self) -> web.Application:
        return make_app(self)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve on `host:port` (0: any free port); returns the port."""
        if self._runner is not None:
            raise RuntimeError("the simulator is already serving")
        runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._host = runner, host
        self._port = int(runner.addresses[0][1])
        return self._port

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("the simulator is not serving; await start() first")
        return f"http://{self._host}:{self._port}"

    async def stop(self) -> None:
        await super().stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._port = None
