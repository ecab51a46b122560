"""Network probe copied to nodes and run there (stdlib only, as root): ping, sink, measure.

    python3 netprobe.py ping --timeout 30 10.99.0.2 10.99.0.3   # "ok IP RTT_MS" / "fail IP"
    python3 netprobe.py sink 10.99.0.2 51821 --idle 30            # TCP sink, pid file
    python3 netprobe.py measure 10.99.0.2 51821 4194304           # {"latency_ms", "mbit_s"}

Nodes may lack ping and iperf3; python3 is on every Debian/Ubuntu server.
"""

import json
import os
import random
import socket
import statistics
import struct
import sys
import threading
import time

PID_FILE = "/run/geotrain/netprobe-sink.pid"


def _checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def icmp_echo(ip, seq, wait):
    """One ICMP echo to `ip`; the round trip in ms, or None when no reply came in `wait` s."""
    ident = os.getpid() & 0xFFFF
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        payload = b"geotrain-probe"
        packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
        start = time.monotonic()
        sock.sendto(packet, (ip, 0))
        while True:
            left = wait - (time.monotonic() - start)
            if left <= 0:
                return None
            sock.settimeout(left)
            try:
                data, addr = sock.recvfrom(2048)
            except socket.timeout:
                return None
            hlen = (data[0] & 0x0F) * 4
            kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[hlen:hlen + 8])
            if addr[0] == ip and kind == 0 and rid == ident and rseq == seq:
                return (time.monotonic() - start) * 1000


def ping(ips, timeout):
    """Ping every address at once, each until it answers or the deadline passes; exit 1 if
    any failed. At once: a first packet starts a WireGuard handshake (a round trip or more),
    and one slow or lost peer must not hold up the answers of the others."""
    deadline = time.monotonic() + timeout
    rtts = {}

    def one(ip):
        # a first packet starts a handshake; two nodes checking each other at the same instant
        # start crossing handshakes that can keep cancelling out, so each waits a random bit
        time.sleep(random.uniform(0, 0.5))
        rtt, seq = None, 0
        while rtt is None and time.monotonic() < deadline:
            seq += 1
            try:
                rtt = icmp_echo(ip, seq, min(1.0, max(0.05, deadline - time.monotonic())))
            except OSError:  # no route yet (an interface coming up): ask again shortly
                time.sleep(0.2)
        rtts[ip] = rtt

    threads = [threading.Thread(target=one, args=(ip,), daemon=True) for ip in ips]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ip in ips:
        print(f"ok {ip} {rtts[ip]:.3f}" if rtts.get(ip) is not None else f"fail {ip}", flush=True)
    return 1 if any(rtts.get(ip) is None for ip in ips) else 0


def sink(ip, port, idle):
    """Accept connections, read each to EOF, answer one byte; exit after `idle` s unused."""
    with open(PID_FILE, "w") as handle:
        handle.write(str(os.getpid()))
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((ip, port))
    server.listen(8)
    server.settimeout(idle)
    try:
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                return 0
            with conn:
                while conn.recv(1 << 16):
                    pass
                conn.sendall(b"k")
    finally:
        if os.path.exists(PID_FILE):
            os.unlink(PID_FILE)


def measure(ip, port, size):
    """Latency (median ICMP RTT of 5) and throughput of one TCP transfer of `size` bytes."""
    rtts = [r for r in (icmp_echo(ip, seq, 1.0) for seq in range(1, 6)) if r is not None]
    block = b"\0" * (1 << 16)
    deadline = time.monotonic() + 10
    while True:  # the sink may still be starting
        try:
            conn = socket.create_connection((ip, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with conn:
        start = time.monotonic()
        sent = 0
        while sent < size:
            sent += conn.send(block[: min(len(block), size - sent)])
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)
        seconds = time.monotonic() - start
    print(json.dumps({"latency_ms": statistics.median(rtts) if rtts else None,
                      "mbit_s": sent * 8 / seconds / 1e6}))
    return 0


def main(argv):
    if argv[0] == "ping":
        timeout = float(argv[2]) if argv[1] == "--timeout" else 10.0
        return ping(argv[3:] if argv[1] == "--timeout" else argv[1:], timeout)
    if argv[0] == "sink":
        idle = float(argv[4]) if len(argv) > 4 else 30.0
        return sink(argv[1], int(argv[2]), idle)
    if argv[0] == "measure":
        return measure(argv[1], int(argv[2]), int(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
