"""Running an app under uvicorn on a loopback port, in a background thread, for tests."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class RunningServer:
    """`with RunningServer(app) as server: server.url` (a real socket on 127.0.0.1)."""

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        config = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> RunningServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
