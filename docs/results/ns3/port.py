"""Port the thesis' simulator sources (hgao10/ns3, written for ns-3.30.1) to Debian's ns-3.37,
editing a copy in place: `port.py <copy of simulator/src>`. Each edit names what it changes and
why; none changes what is simulated. ns-3.30.1's TCP defaults, which 3.37 changed (the thesis
ran NewReno with classic recovery), are set on the program's command line by run_cell.py, not
here (edit 2 says why). No code of the fork is kept here: the edits find their places by
pattern.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def edit(path: Path, old: str, new: str, *, regex: bool = False) -> None:
    text = path.read_text()
    if regex:
        text2, n = re.subn(old, new, text, count=1, flags=re.S | re.M)
    else:
        n = text.count(old)
        text2 = text.replace(old, new, 1)
    if n != 1:
        sys.exit(f"port.py: {path}: expected one match of {old[:60]!r}, found {n}")
    path.write_text(text2)


def main(src: Path) -> None:
    sim, apps = src / "basic-sim" / "model", src / "basic-apps" / "model"

    # 1. ns-3.37 rewrote Callback with variadic templates (no `empty`; CallbackImpl wraps a
    #    std::function), so the fork's per-band byte-trace class no longer compiles. The class
    #    only wrote a log file per enqueue/dequeue; it goes, and so does its one use. The
    #    queues it traced stay: they are what the thesis ran (ns-3-study: 100 packets a band at
    #    every server's egress).
    edit(sim / "topology-ptop.h", r"^class MyCallback\b.*?^\};\n", "", regex=True)
    edit(
        sim / "topology-ptop.cc",
        r"^\s*Callback<void, uint32_t, uint32_t> cb\(Ptr<MyCallback>.*?\n"
        r"\s*queue->TraceConnectWithoutContext \(\"BytesInQueue\", cb\);\n",
        "    // port.py: the per-packet band trace (a log file only) is not built for 3.37\n",
        regex=True,
    )

    # 2. (none since 2026-12-02) ns-3.32 made PRR recovery and ns-3.34 CUBIC the defaults; the
    #    thesis ran ns-3.30.1's TcpNewReno with TcpClassicRecovery (ns-3.30.1
    #    tcp-l4-protocol.cc:84-86). A Config::SetDefault in TcpOptimizer, where the fork sets its
    #    other TCP defaults, came too late for these two: main builds the topology (each node's
    #    TcpL4Protocol, which reads SocketType and RecoveryType when it is created) before it
    #    calls TcpOptimizer, so the runs of 2026-12-01 ran CUBIC with PRR. run_cell.py sets them
    #    on the program's command line instead, which main parses before anything is built.

    # 3. g++ 12 no longer pulls <functional> in through <algorithm>.
    p = apps / "ringallreduce-syncer.h"
    p.write_text("#include <functional>\n" + p.read_text())

    # 4. The worker prints a line per received packet when DEBUG is defined (output only):
    #    off unless built with -DHOROVOD_DEBUG, or a cell's log runs to gigabytes.
    edit(
        apps / "horovod-worker.h",
        r"^#define DEBUG\s*$",
        "#ifdef HOROVOD_DEBUG\n#define DEBUG\n#endif",
        regex=True,
    )

    # 5. ns-3.37's LastAckTimeout retransmits a FIN up to DataRetries times and then notifies
    #    an error close, after the peer's close was already notified (seen in a backtrace of
    #    the first run: FlowSink::HandlePeerError from TcpSocketBase::LastAckTimeout); ns-3.30.1
    #    notified a close once. The apps threw on the second notice of a socket they had already
    #    forgotten: ignore it instead (the socket is closed either way).
    for path in (apps / "flow-sink.cc", apps / "horovod-worker.cc"):
        edit(
            path,
            'throw std::runtime_error("When trying to clean up socket, could not find the socket.");',
            "return;  // port.py: a second close notice (ns-3.37), see port.py",
        )

    # 6. Speed only: a worker copied its left neighbour's map of sent partitions for every
    #    packet it read, and the map is never emptied (a few hundred entries per iteration),
    #    so a run slowed as it went (half of the stack samples of a 3 s run were that copy).
    #    The getter already returns a reference; the copy becomes a reference. Nothing the
    #    loop looks up is added or removed during it (it looks up only bytes it has received).
    edit(
        apps / "horovod-worker.cc",
        "std::map<uint32_t, FusionPartition*> map = m_leftneighbor->GetInflightFusions();",
        "std::map<uint32_t, FusionPartition*> &map = m_leftneighbor->GetInflightFusions();",
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: port.py <copy of hgao10/ns3's simulator/src>")
    main(Path(sys.argv[1]))
