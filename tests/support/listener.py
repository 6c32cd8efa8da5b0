"""A stand-in service for the launcher's tests: `python -m tests.support.listener`.

It appends its pid to LISTENER_PIDFILE (one line per start), then listens on LISTENER_PORT
and accepts until stopped. LISTENER_FAIL makes it print that text and exit with code 4 before
listening; LISTENER_EXIT_AFTER makes it exit with code 3 that many seconds after listening;
LISTENER_WORKER_PIDFILE makes it fork a worker once it listens (same process group and
listening socket, as the gateway's workers have) that writes its pid there and sleeps.
"""

from __future__ import annotations

import os
import socket
import sys
import time


def main() -> None:
    with open(os.environ["LISTENER_PIDFILE"], "a") as pids:
        pids.write(f"{os.getpid()}\n")
    failure = os.environ.get("LISTENER_FAIL")
    if failure:
        print(failure, flush=True)
        sys.exit(4)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(os.environ["LISTENER_PORT"])))
    server.listen()
    worker_pidfile = os.environ.get("LISTENER_WORKER_PIDFILE")
    if worker_pidfile and os.fork() == 0:
        with open(worker_pidfile, "a") as pids:
            pids.write(f"{os.getpid()}\n")
        while True:
            time.sleep(60)
    print("listening", flush=True)
    exit_after = os.environ.get("LISTENER_EXIT_AFTER")
    if exit_after:
        time.sleep(float(exit_after))
        sys.exit(3)
    while True:
        conn, _ = server.accept()
        conn.close()


if __name__ == "__main__":
    main()
