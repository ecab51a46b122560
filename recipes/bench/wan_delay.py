"""User-space WAN latency (this kernel has no netem): a TUN device that holds each packet for a fixed delay.

    ip netns exec gtwan-dc0 python -m recipes.bench.wan_delay --delay-ms 25 --iface eth0 \
        --peer 10.210.0.2=aa:bb:cc:dd:ee:ff

Runs inside one datacenter namespace. Routes to the other datacenters point at
`wdelay0`; this process reads every IP packet the kernel sends there, keeps it
for `delay` milliseconds (a FIFO: the delay is constant, so order holds), then
writes it onto the real uplink with an AF_PACKET socket addressed to the peer's
MAC, where `tbf` shapes it as before. Incoming packets take the normal path, so
each datacenter delays its own egress and the round trip is twice the delay.
The TUN device has no offloads, so the kernel hands over MTU-sized packets.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import socket
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
ETH_P_IP = 0x0800
SO_SNDBUFFORCE = 32
DEVICE = "wdelay0"


def open_tun(name: str = DEVICE) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def parse_mac(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":"))


class DelayLine:
    """Packets in, the same packets out `delay_s` later, on `iface` to the MAC of their destination.

    One thread and a select() loop: no lock hand-offs, so it keeps up with ~50 Mbit/s on a busy CPU."""

    def __init__(self, fd: int, iface: str, delay_s: float, peers: dict[bytes, bytes]) -> None:
        self.fd, self.iface, self.delay_s, self.peers = fd, iface, delay_s, peers
        self.queue: collections.deque = collections.deque()
        self.out = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        self.out.bind((iface, ETH_P_IP))
        # Packets wait in tbf's queue charged to this socket: room for a full queue, so sends never block.
        self.out.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 16 << 20)
        os.set_blocking(fd, False)
        self.sent = self.dropped = 0

    def _read_all(self) -> None:
        now = time.monotonic()
        while True:
            try:
                packet = os.read(self.fd, 65535)
            except BlockingIOError:
                return
            if len(packet) >= 20 and packet[0] >> 4 == 4:  # skip IPv6 router solicitations and the like
                self.queue.append((now + self.delay_s, packet))

    def _send_due(self) -> None:
        now = time.monotonic()
        while self.queue and self.queue[0][0] <= now:
            packet = self.queue.popleft()[1]
            mac = self.peers.get(packet[16:20])
            try:
                if mac is None:
                    raise OSError("no route")
                self.out.sendto(packet, (self.iface, ETH_P_IP, 0, 0, mac))
                self.sent += 1
            except OSError:  # unknown peer or a full qdisc: a loss, as on a real link
                self.dropped += 1

    def run(self) -> None:
        while True:
            timeout = max(0.0, self.queue[0][0] - time.monotonic()) if self.queue else None
            readable, _, _ = select.select([self.fd], [], [], timeout)
            if readable:
                self._read_all()
            self._send_due()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.bench.wan_delay", description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay added to egress")
    parser.add_argument("--iface", default="eth0", help="the real uplink")
    parser.add_argument("--peer", action="append", default=[], metavar="IP=MAC", help="a reachable peer")
    args = parser.parse_args(argv)
    peers = {socket.inet_aton(ip): parse_mac(mac) for ip, mac in (p.split("=", 1) for p in args.peer)}
    line = DelayLine(open_tun(), args.iface, args.delay_ms / 1000, peers)
    print("ready", flush=True)
    line.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
