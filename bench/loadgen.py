"""A small closed-loop HTTP load generator, run as its own process (no Django imported).

Used by bench_pages when wrk is not installed. Each client is a thread with one keep-alive
connection sending the next request as soon as the previous answer arrives. Besides the latency it
sees, it reads the server's own time from each answer's `Server-Timing: app;dur=<ms>` header
(memoryapp.middleware.ServerTimingMiddleware). Prints one JSON line.

    python memoryapp/loadgen.py --url http://127.0.0.1:8000/healthz --clients 10 --seconds 5
"""

import argparse
import http.client
import json
import re
import threading
import time
from urllib.parse import urlsplit

SERVER_TIMING = re.compile(r"\bapp;dur=([0-9.]+)")


def client(url, method, bodies, headers, stop_at, latencies, errors, server_times, offset=0):
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    sent = offset  # each request takes the next body, each client from its own offset
    while time.monotonic() < stop_at:
        t = time.perf_counter()
        sent += 1
        try:
            conn.request(method, path, body=bodies[sent % len(bodies)], headers=headers)
            response = conn.getresponse()
            response.read()
            ok = 200 <= response.status < 400
            timing = SERVER_TIMING.search(response.getheader("Server-Timing") or "")
            if ok and timing:
                server_times.append(float(timing.group(1)) / 1000)
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            ok = False
        if ok:
            latencies.append(time.perf_counter() - t)
        else:
            errors.append(1)
    conn.close()


def run(url, clients, seconds, method="GET", bodies=None, headers=None):
    """Requests/s and latency percentiles (seconds) for `clients` concurrent closed-loop clients;
    `bodies`, when given, are sent in turn."""
    latencies, errors, server_times = [], [], []
    stop_at = time.monotonic() + seconds
    bodies = bodies or [None]
    args = (url, method, bodies, headers or {}, stop_at, latencies, errors, server_times)
    # The clients start evenly apart in `bodies`, so the requests in flight at one moment name different ones.
    spacing = len(bodies) // clients
    threads = [threading.Thread(target=client, args=args, kwargs={"offset": i * spacing}) for i in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    ordered, served = sorted(latencies), sorted(server_times)

    def pct(p, values=ordered):
        return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else None

    return {
        "requests": len(latencies),
        "errors": len(errors),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed if elapsed else 0.0,
        "p50": pct(50),
        "p95": pct(95),
        "p99": pct(99),
        "server_p50": pct(50, served),
        "server_p95": pct(95, served),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--method", default="GET")
    parser.add_argument("--body", action="append", default=[], help="repeatable: requests take them in turn")
    parser.add_argument("--header", action="append", default=[], help="'Name: value', repeatable")
    args = parser.parse_args()
    headers = dict(h.split(": ", 1) for h in args.header)
    bodies = [b.encode() for b in args.body] or None
    print(json.dumps(run(args.url, args.clients, args.seconds, args.method, bodies, headers)))


if __name__ == "__main__":
    main()
