"""The TCP store of a torch-ddp job, run in the root namespace by the job's controller (forked
from the fork server that already imported torch): bound to the management bridge's address
only, through a socket of ours that TCPStore serves on (master_listen_fd), so the ranks meet
over the unshaped management path and nothing listens on the machine's other addresses.

    main([ADDRESS, WORLD_SIZE, PORT_FILE])  # writes the port, serves until SIGTERM
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    addr, world, port_file = (argv if argv is not None else sys.argv[1:])[:3]
    sock = socket.socket()
    sock.bind((addr, 0))
    sock.listen(256)
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        addr, port, int(world), True, timeout=datetime.timedelta(hours=24),
        wait_for_workers=False, master_listen_fd=sock.fileno(),
    )  # fmt: skip
    Path(port_file).write_text(str(port))
    signal.signal(signal.SIGTERM, lambda _s, _f: os._exit(0))
    while store is not None:
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
